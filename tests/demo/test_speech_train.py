"""Training on speech: the main job's command on a tiny corpus (WER, CER, beam search and examples in the
summary, resumable), a tiny run whose WER falls, and demo/transcribe.py on a WAV file made here."""
import dataclasses
import json

import numpy as np
import pytest
import torch

from speech_fixtures import TINY_CORPUS, require_synthesis

require_synthesis()

from demo import train, transcribe
from demo.data import StepLoader
from demo.distributed import World
from demo.speech.corpus import SpeechDataset
from demo.speech.phrases import VOCABULARY, labels_to_text

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, speech_cache, monkeypatch_module):
    """A 2-step speech run of the tiny preset (its corpus in the session's cache folder)."""
    monkeypatch_module.setattr(train, "speech_task_config", lambda config: TINY_CORPUS)
    monkeypatch_module.setenv("DIMTORCH_SPEECH_CACHE", str(speech_cache))
    out = tmp_path_factory.mktemp("speech-run")
    summary = train.main(["--config", "tiny", "--no-progress", "--out", str(out), "--steps", "2", "--beam-size", "2",
                          "--decode-examples", "2"])
    return out, summary


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_speech_run_reports_wer_cer_beam_and_examples(trained, capsys):
    out, summary = trained
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["task"] == "speech" and on_disk["frontend_config"]["num_mel"] == 16
    for d in on_disk["dev"]:
        assert {"wer", "cer", "ler", "loss", "seconds"} <= set(d)
    assert {"wer_beam", "cer_beam", "wer_prefix_beam", "cer_prefix_beam"} <= set(on_disk["final_dev_beam"])
    assert len(on_disk["decode_examples"]) == 2 and on_disk["frames_per_s"] > 0
    assert (out / "training.png").read_bytes()[:4] == b"\x89PNG"
    resumed = train.main(["--config", "tiny", "--no-progress", "--out", str(out), "--steps", "3", "--resume",
                          "--beam-size", "1", "--decode-examples", "0"])
    assert resumed["step"] == 3 and resumed["dev"][-1]["seconds"] >= resumed["dev"][-2]["seconds"]
    with pytest.raises(SystemExit, match="--task speech, not --task synthetic"):
        train.main(["--task", "synthetic", "--config", "tiny", "--no-progress", "--out", str(out), "--steps", "4",
                    "--resume"])


def test_transcribe_a_wav_file_made_here(trained, tmp_path, capsys):
    out, _ = trained
    ds = SpeechDataset(TINY_CORPUS, "dev")
    audio = ds[0][0].numpy()
    wav16 = tmp_path / "dev0.wav"
    transcribe.write_wav(wav16, audio)
    assert np.abs(transcribe.read_wav(wav16) - audio).max() < 1e-4
    # the same utterance at 22.05 kHz in stereo: resampled and mixed down on reading
    import soxr
    import wave
    stereo = np.repeat(soxr.resample(audio, 16000, 22050)[:, None], 2, axis=1)
    wav22 = tmp_path / "dev0-22k.wav"
    with wave.open(str(wav22), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(22050)
        w.writeframes(np.round(np.clip(stereo, -1, 1) * 32767).astype("<i2").tobytes())
    assert abs(len(transcribe.read_wav(wav22)) - len(audio)) <= 2
    texts = transcribe.main(["--checkpoint", str(out / "checkpoint.pt"), str(wav16), str(wav22),
                             "--say", "seven forty two", "--save-wav", str(tmp_path / "said.wav")])
    printed = capsys.readouterr().out
    assert len(texts) == 3 and str(wav16) in printed and "--say 'seven forty two'" in printed
    assert all(set(t.split()) <= VOCABULARY for t in texts)  # the lexicon-constrained beam search
    assert len(transcribe.read_wav(tmp_path / "said.wav")) > 0.5 * 16000
    with pytest.raises(SystemExit, match="not a PCM WAV file"):
        transcribe.read_wav(out / "summary.json")


class _Few:
    """The first `n` utterances with words of a SpeechDataset, as StepLoader wants a dataset."""

    def __init__(self, ds, n):
        self.ids = [i for i in range(len(ds)) if ds.texts[i]][:n]
        self.ds = ds
        self.input_lengths = [ds.input_lengths[i] for i in self.ids]
        self.target_lengths = [ds.target_lengths[i] for i in self.ids]
        self.collate, self.empty_item = ds.collate, ds.empty_item

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ds[self.ids[i]]


def test_tiny_training_run_wer_falls(speech_cache):
    """A small model learns 4 utterances: its greedy WER on them falls from 100% (train.evaluate's WER)."""
    torch.manual_seed(0)
    preset = train.SPEECH_PRESETS["tiny"]
    cfg = dataclasses.replace(preset["model"], model_dim=32, ff_dim=64, dropout=0.0, att_dropout=0.0)
    model = train.build_model("dimtorch", cfg, None, dataclasses.replace(preset["frontend"], max_time_mask=0,
                                                                          max_feature_mask=0))
    data = _Few(SpeechDataset(TINY_CORPUS, "train", root=speech_cache), 4)
    loader = StepLoader(data, max_frames=10 ** 7, shuffle=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    params = list(model.parameters())

    def wer():
        return train.evaluate(lambda b: model.loss(*b), model, loader, torch.device("cpu"), World(),
                              to_text=labels_to_text)["wer"]
    before = wer()
    (step,) = list(loader.steps(0))
    for _ in range(110):
        model.set_train_step(0)
        train.train_step(lambda *a: _loss(model, *a), opt, params, step.batch, step.labels, step.seqs, 1e-2, 1.0)
    after = wer()
    assert before == 1.0 and after < 0.5, (before, after)


def _loss(model, features, targets, lengths, total_labels, total_seqs):
    return model.loss(features, lengths.feature_lengths, targets, lengths.target_lengths, total_labels=total_labels,
                      total_seqs=total_seqs)
