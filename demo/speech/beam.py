"""CTC prefix beam search (Graves 2012; Hannun et al. 2014's form without a language model), optionally
constrained to a lexicon: a hypothesis may only spell words of the lexicon (prefixes while a word is open),
which is what a small-vocabulary recogniser does instead of a language model.

Runs on the host over each sequence's own frames (numpy, log domain): evaluation only.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Tuple

import numpy as np
import torch

_NEG = -np.inf


def _prefixes(words: FrozenSet[str]) -> FrozenSet[str]:
    return frozenset(w[:i] for w in words for i in range(len(w) + 1))


class Lexicon:
    """Which character sequences spell lexicon words: `allows(text)` while every finished word (followed by
    the separator) is a word and the open one a word's prefix; `complete(text)` when the open one is a word."""

    def __init__(self, words, separator: str = " "):
        self.words = frozenset(words)
        self.prefixes = _prefixes(self.words)
        self.separator = separator

    def allows(self, text: str) -> bool:
        *done, open_word = text.split(self.separator)
        return open_word in self.prefixes and all(w in self.words for w in done if w)

    def complete(self, text: str) -> bool:
        return all(w in self.words for w in text.split(self.separator) if w)


def _logaddexp(a: float, b: float) -> float:
    if a == _NEG:
        return b
    if b == _NEG:
        return a
    return max(a, b) + float(np.log1p(np.exp(-abs(a - b))))


def ctc_prefix_beam_search(logits: torch.Tensor, lengths: torch.Tensor, blank: int, beam: int = 8,
                           alphabet: Optional[str] = None, lexicon: Optional[Lexicon] = None,
                           prune: float = -10.0) -> List[List[int]]:
    """Best label sequence per sequence: logits (B, T, V) (any device), lengths (B,) int64 on the host. Keeps the
    `beam` most probable prefixes (blank and non-blank ending probabilities summed over paths), expanding per
    frame only labels whose log-probability is above `prune`. With `lexicon` (and `alphabet`, the label
    characters), prefixes that leave the lexicon are dropped and finished hypotheses must end in a word."""
    log_probs = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
    out = []
    for b, n in enumerate(lengths.tolist()):
        out.append(_search(log_probs[b, :n], blank, beam, alphabet, lexicon, prune))
    return out


def _search(lp: np.ndarray, blank: int, beam: int, alphabet, lexicon, prune) -> List[int]:
    # prefix (tuple of labels) -> (log p ending in blank, log p ending in a label)
    beams: Dict[Tuple[int, ...], Tuple[float, float]] = {(): (0.0, _NEG)}
    text = {(): ""}
    for t in range(lp.shape[0]):
        frame = lp[t]
        candidates = [int(c) for c in np.nonzero(frame > prune)[0] if c != blank] or \
            [int(c) for c in np.argsort(frame)[-2:] if c != blank]
        new: Dict[Tuple[int, ...], List[float]] = {}

        def add(prefix, pb, pnb):
            cur = new.setdefault(prefix, [_NEG, _NEG])
            cur[0], cur[1] = _logaddexp(cur[0], pb), _logaddexp(cur[1], pnb)
        for prefix, (pb, pnb) in beams.items():
            total = _logaddexp(pb, pnb)
            add(prefix, total + frame[blank], _NEG)  # a blank: the prefix stays, now ending in blank
            last = prefix[-1] if prefix else None
            for c in candidates:
                p = float(frame[c])
                if c == last:
                    add(prefix, _NEG, pnb + p)  # the same label again without a blank: merged
                    extended = prefix + (c,)
                    score = pb + p  # a repeat needs a blank between
                else:
                    extended = prefix + (c,)
                    score = total + p
                if extended not in text:
                    text[extended] = text[prefix] + (alphabet[c] if alphabet else "")
                if lexicon is not None and not lexicon.allows(text[extended]):
                    continue
                add(extended, _NEG, score)
        ranked = sorted(new.items(), key=lambda kv: _logaddexp(*kv[1]), reverse=True)
        beams = {k: (v[0], v[1]) for k, v in ranked[:beam]}
    finals = sorted(beams.items(), key=lambda kv: _logaddexp(*kv[1]), reverse=True)
    if lexicon is not None:
        done = [kv for kv in finals if lexicon.complete(text[kv[0]])]
        finals = done or finals
    return list(finals[0][0]) if finals else []


__all__ = ["ctc_prefix_beam_search", "Lexicon"]
