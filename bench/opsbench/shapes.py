"""The shape sets the benchmark runs on: tiny (overhead dominates), small-real, and meta (no compute)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShapeSet:
    """Sizes of one benchmark case; `lengths` are the per-sequence lengths, max(lengths) is the padded time."""
    name: str
    description: str
    lengths: tuple
    feature: int
    out: int
    heads: int
    vocab: int
    conv_kernel: int
    conformer_kernel: int
    device: str = "cpu"

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def time(self) -> int:
        return max(self.lengths)

    @property
    def head_dim(self) -> int:
        return self.feature // self.heads

    @property
    def ff_dim(self) -> int:
        return 4 * self.feature

    @property
    def on_meta(self) -> bool:
        return self.device == "meta"


TINY = ShapeSet(
    name="tiny", description="batch 3, time <= 7, feature 8, CPU: framework overhead dominates",
    lengths=(7, 5, 3), feature=8, out=6, heads=2, vocab=10, conv_kernel=3, conformer_kernel=3)

SMALL = ShapeSet(
    name="small", description="batch 8, time <= 50, feature 256, CPU: small real model sizes",
    lengths=(50, 46, 41, 37, 30, 24, 17, 9), feature=256, out=256, heads=4, vocab=1000, conv_kernel=3,
    conformer_kernel=31)

META = ShapeSet(
    name="meta", description="small-real sizes on torch's meta device: framework cost with no compute",
    lengths=SMALL.lengths, feature=SMALL.feature, out=SMALL.out, heads=SMALL.heads, vocab=SMALL.vocab,
    conv_kernel=SMALL.conv_kernel, conformer_kernel=SMALL.conformer_kernel, device="meta")

SHAPE_SETS = {s.name: s for s in (TINY, SMALL, META)}
