"""espeak-ng driven through ctypes: the library and voice data come from the `espeakng-loader` wheel (PyPI),
so no system package is needed. espeak-ng is GPL-3.0-or-later; only the demo loads it (see demo/README.md).

espeak-ng keeps one synthesiser per process (global state): `Synthesizer()` initializes it once per
process, and each `synthesize` call sets the voice and prosody it is given before speaking, so the
result depends only on its arguments. Not thread-safe (one synthesis at a time per process).
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import List, Optional

import numpy as np

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_RATE, _VOLUME, _PITCH, _RANGE = 1, 2, 3, 4
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class EspeakError(RuntimeError):
    pass


class Synthesizer:
    """espeak-ng in this process (initialized on first use, once per process: DataLoader workers and
    pool processes each get their own). `synthesize(text, voice, rate, pitch, pitch_range)` -> int16
    samples at `sample_rate` (22050 Hz for espeak-ng's voices)."""

    _lock = threading.Lock()
    _lib = None
    _pid: Optional[int] = None
    sample_rate: int = 0

    def __init__(self):
        cls = type(self)
        with cls._lock:
            if cls._lib is None or cls._pid != os.getpid():
                cls._init()

    @classmethod
    def _init(cls) -> None:
        try:
            import espeakng_loader
        except ImportError:
            raise EspeakError("demo.speech: the speech task needs espeak-ng from the `espeakng-loader` wheel: "
                              "pip install espeakng-loader (or pip install '.[demo]')") from None
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0)
        if rate <= 0:
            raise EspeakError(f"demo.speech: espeak_Initialize failed (returned {rate})")
        cls._chunks: List[np.ndarray] = []

        def on_audio(wav, n, events):
            if n > 0:
                cls._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0
        cls._callback = _CALLBACK(on_audio)  # kept alive with the class
        lib.espeak_SetSynthCallback(cls._callback)
        cls._lib, cls._pid, cls.sample_rate = lib, os.getpid(), rate

    def synthesize(self, text: str, voice: str, rate: int = 175, pitch: int = 50, pitch_range: int = 50) -> np.ndarray:
        """int16 samples of `text` spoken by `voice` (an espeak-ng voice name such as "en-us+m3"), at
        `rate` words per minute, base pitch and pitch range 0..100 (espeak-ng's parameters)."""
        cls, lib = type(self), type(self)._lib
        with cls._lock:
            if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise EspeakError(f"demo.speech: espeak-ng has no voice {voice!r}")
            for param, value in ((_RATE, rate), (_PITCH, pitch), (_RANGE, pitch_range), (_VOLUME, 100)):
                lib.espeak_SetParameter(param, int(value), 0)
            cls._chunks = []
            data = text.encode() + b"\0"
            err = lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
            if err != 0:
                raise EspeakError(f"demo.speech: espeak_Synth failed ({err}) for {text!r}")
            lib.espeak_Synchronize()
            chunks, cls._chunks = cls._chunks, []
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
