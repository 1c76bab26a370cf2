"""The speech corpus's utterances: what each one says and how (drawn per (seed, split, index)), synthesized by
espeak-ng, resampled to 16 kHz and cached on disk as int16 (clean speech; noise is added on access).

No torch here: the synthesis runs in fresh Python processes that import only this module, numpy, soxr and espeak.

Cache layout (one folder per synthesis config, named by its hash; `cache_dir()`): `<split>.npy` (every
utterance's samples, concatenated), `<split>.offsets.npy` (n + 1 offsets) and `<split>.json` (the specs),
written to temporary names and renamed, the json last: a folder with the json is complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from demo.speech.phrases import draw_phrase

SPLIT_IDS = {"train": 1, "dev": 2, "test": 3}
ACCENTS = ("en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-us-nyc", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd")
# espeak-ng's voice variants that sound like people (robots, whisper, croak and the like left out). Dev and test
# speak with variants that train never hears.
TRAIN_VARIANTS = (
    "", "Alex", "Alicia", "Andrea", "Andy", "AnxiousAndy", "Denis", "Diogo", "Gene", "Gene2", "Henrique", "Hugo",
    "Jacky", "Lee", "Marco", "Mario", "Michael", "Mike", "Nguyen", "Reed", "RicishayMax", "Storm", "adam", "anika",
    "announcer", "antonio", "aunty", "belinda", "boris", "caleb", "david", "ed", "edward", "f1", "f2", "f4", "f5",
    "grandpa", "gustave", "ian", "iven", "iven2", "iven4", "john", "klatt", "klatt2", "klatt4", "linda", "m1", "m2",
    "m3", "m5", "m6", "m8", "marcelo", "max", "michel", "miguel", "norbert", "pablo", "paul", "pedro", "quincy",
    "rob", "sandro", "shelby", "steph", "steph3", "travis", "victor")
DEV_VARIANTS = ("Annie", "benjamin", "f3", "grandma", "iven3", "klatt3", "m4", "m7", "robert", "steph2", "zac",
                "edward2")
TEST_VARIANTS = ("RicishayMax2", "RicishayMax3", "mike2", "klatt5")
ESPEAK_RATE = 22050


@dataclass(frozen=True)
class SpeechConfig:
    """The corpus. Synthesis fields (hashed into the cache folder's name) and noise fields (applied on access)."""
    seed: int = 0
    train_utterances: int = 4000
    dev_utterances: int = 200
    sample_rate: int = 16000
    min_rate: int = 130  # espeak-ng words per minute
    max_rate: int = 190
    min_pitch: int = 25  # espeak-ng base pitch 0..100
    max_pitch: int = 75
    min_pitch_range: int = 20
    max_pitch_range: int = 90
    empty_fraction: float = 0.0  # utterances with no words (tests)
    # on access:
    min_snr_db: float = 5.0
    max_snr_db: float = 35.0
    max_edge_silence_s: float = 0.25  # noise-only padding before and after the speech, 0..this

    def to_dict(self) -> dict:
        return asdict(self)

    def synthesis_key(self) -> str:
        """Hash of what the cached audio depends on (the utterance counts too: a folder holds whole splits)."""
        keys = ("seed", "train_utterances", "dev_utterances", "sample_rate", "min_rate", "max_rate", "min_pitch",
                "max_pitch", "min_pitch_range", "max_pitch_range", "empty_fraction")
        text = json.dumps({k: getattr(self, k) for k in keys} | {"version": 1, "variants": [TRAIN_VARIANTS,
                          DEV_VARIANTS, TEST_VARIANTS], "accents": ACCENTS}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def num_utterances(self, split: str) -> int:
        return {"train": self.train_utterances, "dev": self.dev_utterances, "test": self.dev_utterances}[split]


@dataclass(frozen=True)
class UtteranceSpec:
    text: str
    voice: str  # espeak-ng voice name: accent, or accent+variant
    rate: int
    pitch: int
    pitch_range: int


def variants_of(split: str) -> Tuple[str, ...]:
    return {"train": TRAIN_VARIANTS, "dev": DEV_VARIANTS, "test": TEST_VARIANTS}[split]


def _rng(cfg: SpeechConfig, split: str, index: int, stream: int = 0) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, SPLIT_IDS[split], index, stream])


def _draw_text(cfg: SpeechConfig, rng: np.random.Generator) -> str:
    return "" if rng.random() < cfg.empty_fraction else draw_phrase(rng)


def make_specs(cfg: SpeechConfig, split: str) -> List[UtteranceSpec]:
    """The utterances of `split`, each drawn from its own generator (seed, split, index). Train never says a
    text that dev or test says (it draws again), so held-out texts are held out too."""
    if split not in SPLIT_IDS:
        raise ValueError(f"demo.speech.make_specs(): split must be one of {sorted(SPLIT_IDS)}, got {split!r}")
    held_out = set()
    if split == "train":
        for other in ("dev", "test"):
            held_out |= {s.text for s in make_specs(cfg, other)} - {""}
    variants = variants_of(split)
    specs = []
    for i in range(cfg.num_utterances(split)):
        rng = _rng(cfg, split, i)
        text = _draw_text(cfg, rng)
        while text in held_out:
            text = _draw_text(cfg, rng)
        accent = ACCENTS[int(rng.integers(0, len(ACCENTS)))]
        variant = variants[int(rng.integers(0, len(variants)))]
        specs.append(UtteranceSpec(text, accent + ("+" + variant if variant else ""),
                                   int(rng.integers(cfg.min_rate, cfg.max_rate + 1)),
                                   int(rng.integers(cfg.min_pitch, cfg.max_pitch + 1)),
                                   int(rng.integers(cfg.min_pitch_range, cfg.max_pitch_range + 1))))
    return specs


def synthesize(spec: UtteranceSpec, sample_rate: int = 16000) -> np.ndarray:
    """int16 samples of `spec` at `sample_rate`: espeak-ng's 22.05 kHz output resampled with soxr (high quality),
    peak-normalized to 0.9 of full scale (espeak-ng's voices differ in level; a random gain comes on access).
    An empty text gives no samples."""
    import soxr
    from demo.speech.espeak import Synthesizer
    if not spec.text.strip():
        return np.zeros(0, np.int16)
    wav = Synthesizer().synthesize(spec.text, spec.voice, spec.rate, spec.pitch, spec.pitch_range)
    x = soxr.resample(wav.astype(np.float32) / 32768.0, ESPEAK_RATE, sample_rate, quality="HQ")
    peak = float(np.abs(x).max()) if x.size else 0.0
    if peak > 0:
        x = x * (0.9 / peak)
    return np.round(x * 32767.0).astype(np.int16)


def _synthesize_shard(specs: List[dict], sample_rate: int, out: Path) -> None:
    """Synthesizes `specs` into `out` (.npy of the concatenated samples) and `out`.offsets.npy."""
    audio = [synthesize(UtteranceSpec(**s), sample_rate) for s in specs]
    offsets = np.zeros(len(audio) + 1, np.int64)
    offsets[1:] = np.cumsum([len(a) for a in audio])
    np.save(str(out) + ".offsets.npy", offsets)
    np.save(out, np.concatenate(audio) if audio else np.zeros(0, np.int16))


def _worker_main() -> None:
    """A synthesis process: reads {"specs", "sample_rate", "out"} as JSON from stdin."""
    job = json.load(sys.stdin)
    _synthesize_shard(job["specs"], job["sample_rate"], Path(job["out"]))


def _synthesize_all(specs: List[UtteranceSpec], sample_rate: int, folder: Path, processes: int):
    """(samples, offsets) of all specs, in order; shards in `processes` fresh Python processes (each its own
    espeak-ng; fresh processes import only this module, never the caller's main script or torch)."""
    n = len(specs)
    bounds = [round(k * n / processes) for k in range(processes + 1)]
    shards = [(bounds[k], bounds[k + 1]) for k in range(processes) if bounds[k + 1] > bounds[k]]
    outs = [folder / f"shard-{os.getpid()}-{k}.npy" for k in range(len(shards))]
    if len(shards) <= 1:
        _synthesize_shard([asdict(s) for s in specs], sample_rate, outs[0] if outs else folder / "shard.npy")
    else:
        repo = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
        procs = []
        for (a, b), out in zip(shards, outs):
            p = subprocess.Popen([sys.executable, "-c", "from demo.speech.synthesis import _worker_main; _worker_main()"],
                                 stdin=subprocess.PIPE, cwd=repo, env=env)
            p.stdin.write(json.dumps({"specs": [asdict(s) for s in specs[a:b]], "sample_rate": sample_rate,
                                      "out": str(out)}).encode())
            p.stdin.close()
            procs.append(p)
        failed = [p.wait() for p in procs]
        if any(failed):
            raise RuntimeError(f"demo.speech: a synthesis process failed (exit codes {failed}); see its message above")
    if not outs:
        return np.zeros(0, np.int16), np.zeros(1, np.int64)
    audio, offsets = [], [np.zeros(1, np.int64)]
    for out in outs:
        audio.append(np.load(out))
        offsets.append(np.load(str(out) + ".offsets.npy")[1:] + offsets[-1][-1])
        os.remove(out)
        os.remove(str(out) + ".offsets.npy")
    return np.concatenate(audio), np.concatenate(offsets)


def cache_root() -> Path:
    """$DIMTORCH_SPEECH_CACHE, else .cache/speech in the repository (git-ignored)."""
    env = os.environ.get("DIMTORCH_SPEECH_CACHE")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache" / "speech"


def cache_dir(cfg: SpeechConfig, root: Optional[Path] = None) -> Path:
    return Path(root if root is not None else cache_root()) / f"corpus-{cfg.synthesis_key()}"


def ensure_cached(cfg: SpeechConfig, split: str, root: Optional[Path] = None, processes: Optional[int] = None,
                  log=None) -> Path:
    """The cache folder holding `split`, synthesizing it first if it is not there (in `processes` fresh
    processes, default: the CPU count, at most 8). Returns the folder."""
    folder = cache_dir(cfg, root)
    if (folder / f"{split}.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    specs = make_specs(cfg, split)
    t0 = time.monotonic()
    processes = processes or min(8, os.cpu_count() or 1)
    samples, offsets = _synthesize_all(specs, cfg.sample_rate, folder, processes)
    tag = f".{os.getpid()}.tmp"
    np.save(folder / f"{split}.npy{tag}.npy", samples)
    np.save(folder / f"{split}.offsets.npy{tag}.npy", offsets)
    os.replace(folder / f"{split}.npy{tag}.npy", folder / f"{split}.npy")
    os.replace(folder / f"{split}.offsets.npy{tag}.npy", folder / f"{split}.offsets.npy")
    meta = {"config": cfg.to_dict(), "split": split, "specs": [asdict(s) for s in specs],
            "seconds_to_synthesize": round(time.monotonic() - t0, 2), "processes": processes}
    (folder / f"{split}.json{tag}").write_text(json.dumps(meta))
    os.replace(folder / f"{split}.json{tag}", folder / f"{split}.json")
    if log is not None:
        log(f"speech corpus: synthesized {split} ({len(specs)} utterances, {offsets[-1] / cfg.sample_rate / 3600:.2f} h,"
            f" {offsets[-1] * 2 / 1e6:.0f} MB) in {meta['seconds_to_synthesize']:.1f} s with {processes} processes "
            f"into {folder}")
    return folder


__all__ = ["SpeechConfig", "UtteranceSpec", "make_specs", "synthesize", "ensure_cached", "cache_dir", "cache_root",
           "ACCENTS", "TRAIN_VARIANTS", "DEV_VARIANTS", "TEST_VARIANTS", "variants_of", "SPLIT_IDS"]
