"""Word and character error rates of transcripts (edit distance over the reference's words or characters)."""
from __future__ import annotations

from typing import Iterable, Tuple

from demo.ctc_decode import edit_distance


def word_errors(ref: str, hyp: str) -> Tuple[int, int]:
    """(word edit operations, reference words)."""
    r = ref.split()
    return edit_distance(r, hyp.split()), len(r)


def char_errors(ref: str, hyp: str) -> Tuple[int, int]:
    """(character edit operations, reference characters), spaces included, runs of spaces as one."""
    r, h = " ".join(ref.split()), " ".join(hyp.split())
    return edit_distance(r, h), len(r)


def error_rates(pairs: Iterable[Tuple[str, str]]) -> dict:
    """{"wer", "cer", "words", "chars"} over (reference, hypothesis) pairs (a rate is 0 without references)."""
    we = w = ce = c = 0
    for ref, hyp in pairs:
        a, b = word_errors(ref, hyp)
        x, y = char_errors(ref, hyp)
        we, w, ce, c = we + a, w + b, ce + x, c + y
    return {"wer": we / max(1, w), "cer": ce / max(1, c), "words": w, "chars": c}


__all__ = ["word_errors", "char_errors", "error_rates"]
