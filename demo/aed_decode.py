"""Greedy attention-decoder hypotheses collected step by step (end at EOS or at a length limit)."""
from __future__ import annotations

from typing import List

import torch


class GreedyHypotheses:
    """Greedy decoder outputs per sequence, one step at a time: sequence b ends at its first EOS (not
    part of its hypothesis) or after limits[b] = max_len_factor * enc_lengths[b] labels (0 frames: no
    labels). `add` reads the step's labels on the host: evaluation only."""

    def __init__(self, enc_lengths: torch.Tensor, eos: int, max_len_factor: int = 2):
        self.limits = [max_len_factor * n for n in enc_lengths.tolist()]
        self.eos = eos
        self.hyps: List[List[int]] = [[] for _ in self.limits]
        self.open = [n > 0 for n in self.limits]

    @property
    def max_steps(self) -> int:
        return max(self.limits, default=0)

    def add(self, labels: torch.Tensor) -> bool:
        """labels (B,) of this step; True while some sequence is still open."""
        for b, y in enumerate(labels.tolist()):
            if self.open[b]:
                if y == self.eos:
                    self.open[b] = False
                else:
                    self.hyps[b].append(y)
                    self.open[b] = len(self.hyps[b]) < self.limits[b]
        return any(self.open)
