"""Transcribes speech with a model trained by demo/train.py (--task speech): WAV files, or a sentence spoken by
espeak-ng first (--say).

    python demo/transcribe.py --checkpoint runs/main/checkpoint.pt file.wav [more.wav ...]
    python demo/transcribe.py --checkpoint runs/main/checkpoint.pt --say "seven forty two"
    python demo/transcribe.py --say "set an alarm for six thirty" --voice en-gb-x-rp+f3 --save-wav alarm.wav

WAV files: PCM 8/16/32-bit, any rate (resampled to the model's 16 kHz with soxr), channels averaged. Prints one
line per input: its name and the words (CTC prefix beam search constrained to the task's words; --no-lexicon:
without, over dims; --beam-size 1: greedy CTC). The checkpoint says which implementation and configuration it holds.
"""
from __future__ import annotations

import argparse
import sys
import wave
from pathlib import Path
from typing import List, Optional

if __package__ in (None, ""):  # run as a script: make `demo` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import torch

from demo.checkpoint import CheckpointError, load_checkpoint, load_model_state
from demo.reference_frontend import FrontendConfig
from demo.reference_model import DecoderConfig, ModelConfig


def read_wav(path, sample_rate: int = 16000) -> np.ndarray:
    """float32 mono samples of a PCM WAV file at `sample_rate` (soxr resampling when the file's rate differs)."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels, n = w.getframerate(), w.getsampwidth(), w.getnchannels(), w.getnframes()
            data = w.readframes(n)
    except (wave.Error, EOFError) as e:
        raise SystemExit(f"transcribe.py: {str(path)!r} is not a PCM WAV file ({e})") from None
    if width == 1:
        x = (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width in (2, 4):
        x = np.frombuffer(data, np.int16 if width == 2 else np.int32).astype(np.float32) / float(2 ** (8 * width - 1))
    else:
        raise SystemExit(f"transcribe.py: {str(path)!r} has {8 * width}-bit samples; 8, 16 or 32-bit PCM is read")
    x = x.reshape(-1, channels).mean(axis=1)
    if rate != sample_rate:
        import soxr
        x = soxr.resample(x, rate, sample_rate, quality="HQ")
    return np.ascontiguousarray(x, dtype=np.float32)


def write_wav(path, audio: np.ndarray, sample_rate: int = 16000) -> None:
    """16-bit PCM mono."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2").tobytes())


def say(text: str, voice: str, sample_rate: int = 16000) -> np.ndarray:
    """`text` spoken by espeak-ng's `voice` at `sample_rate`, float32 (as the corpus makes it, without noise)."""
    from demo.speech.synthesis import UtteranceSpec, synthesize
    return synthesize(UtteranceSpec(text, voice, 160, 50, 50), sample_rate).astype(np.float32) / 32768.0


def load_model(path):
    """(model in eval mode, frontend config) from a demo/train.py --task speech checkpoint."""
    from demo.train import build_model
    try:
        state = load_checkpoint(path, impl=None)
    except CheckpointError as e:
        raise SystemExit(f"transcribe.py: {e}") from None
    if state.get("task", "synthetic") != "speech" or not state.get("frontend_config"):
        raise SystemExit(f"transcribe.py: {str(path)!r} is a checkpoint of --task {state.get('task', 'synthetic')}; "
                         f"transcribing needs one of --task speech")
    if "model" not in state:
        raise SystemExit(f"transcribe.py: {str(path)!r} is a sharded (--fsdp) checkpoint; train without --fsdp or "
                         f"continue it with one process to get a single-file checkpoint")
    frontend = FrontendConfig.from_dict(state["frontend_config"])
    dec = state.get("decoder_config")
    model = build_model(state["impl"], ModelConfig.from_dict(state["model_config"]),
                        DecoderConfig.from_dict(dec) if dec else None, frontend)
    load_model_state(model, state["model"], path)
    return model.eval(), frontend


@torch.no_grad()
def transcribe(model, audios: List[np.ndarray], beam_size: int = 8, lexicon: bool = True) -> List[str]:
    """The words of each waveform (16 kHz float32), one batch: CTC prefix beam search with the task's lexicon,
    without it over dims (lexicon False), or greedy (beam_size 1)."""
    from demo.ctc_decode import greedy_decode
    from demo.speech.beam import Lexicon, ctc_prefix_beam_search
    from demo.speech.corpus import collate_audio
    from demo.speech.phrases import ALPHABET, VOCABULARY, labels_to_text
    batch = collate_audio([(torch.from_numpy(a), torch.zeros(0, dtype=torch.int64)) for a in audios])
    logits, lengths = model(batch.features, batch.feature_lengths)
    if beam_size > 1 and not lexicon:
        from demo.speech.beam_dims import ctc_prefix_beam_search_dims
        hyps = ctc_prefix_beam_search_dims(logits, lengths, model.blank_index, beam_size)
    elif beam_size > 1:
        hyps = ctc_prefix_beam_search(logits, lengths, model.blank_index, beam_size, alphabet=ALPHABET,
                                      lexicon=Lexicon(VOCABULARY))
    else:
        hyps = greedy_decode(logits, lengths, model.blank_index)
    return [" ".join(labels_to_text(h).split()) for h in hyps]


def main(argv: Optional[List[str]] = None) -> List[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="examples:\n" + __doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("wavs", nargs="*", help="WAV files to transcribe")
    p.add_argument("--checkpoint", default="runs/main/checkpoint.pt", help="a demo/train.py --task speech checkpoint "
                   "(default: %(default)s)")
    p.add_argument("--say", action="append", default=[], help="a sentence for espeak-ng to speak, then transcribe "
                   "(repeatable)")
    p.add_argument("--voice", default="en-us+m7", help="espeak-ng voice for --say (default: %(default)s, a dev voice)")
    p.add_argument("--save-wav", help="with --say: also write the (first) spoken sentence to this WAV file")
    p.add_argument("--beam-size", type=int, default=8, help="CTC prefix beam search with the task's lexicon; 1: "
                   "greedy (default: %(default)s)")
    p.add_argument("--no-lexicon", action="store_true", help="beam search without the task's lexicon (over dims: "
                   "demo/speech/beam_dims.py)")
    args = p.parse_args(argv)
    if not args.wavs and not args.say:
        p.error("give WAV files or --say \"some words\"")
    names, audios = [], []
    for path in args.wavs:
        names.append(path)
        audios.append(read_wav(path))
    if args.say:
        for i, text in enumerate(args.say):
            audio = say(text, args.voice)
            if i == 0 and args.save_wav:
                write_wav(args.save_wav, audio)
            names.append(f"--say {text!r}")
            audios.append(audio)
    if not Path(args.checkpoint).exists():
        raise SystemExit(f"transcribe.py: no checkpoint {args.checkpoint!r}; train one with bash scripts/main.sh")
    model, _ = load_model(args.checkpoint)
    texts = transcribe(model, audios, args.beam_size, lexicon=not args.no_lexicon)
    for name, text in zip(names, texts):
        print(f"{name}: {text}", flush=True)
    return texts


if __name__ == "__main__":
    main()
