"""Greedy CTC decoding and the label error rate (edit distance over reference length)."""
from __future__ import annotations

from typing import List, Sequence

import torch


def greedy_decode(logits: torch.Tensor, lengths: torch.Tensor, blank: int) -> List[List[int]]:
    """Best path per sequence: argmax per frame over the first lengths[b] frames, repeats merged,
    blanks dropped. logits (B, T, V+1) on any device; lengths (B,) int64 on the host."""
    best = logits.argmax(dim=-1).cpu()  # one device read per batch: evaluation only
    out = []
    for b, n in enumerate(lengths.tolist()):
        path = torch.unique_consecutive(best[b, :n]).tolist()
        out.append([p for p in path if p != blank])
    return out


def edit_distance(ref: Sequence[int], hyp: Sequence[int]) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def label_errors(targets: torch.Tensor, target_lengths: torch.Tensor, hyps: List[List[int]]) -> tuple:
    """(edit operations, reference labels) summed over the batch; targets (B, L) padded."""
    refs = targets.cpu()
    errors = labels = 0
    for b, n in enumerate(target_lengths.tolist()):
        ref = refs[b, :n].tolist()
        errors += edit_distance(ref, hyps[b])
        labels += n
    return errors, labels
