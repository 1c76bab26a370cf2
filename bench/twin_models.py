"""The demo's Conformer + CTC twins with the same weights: the hand-written PyTorch reference and the
dimtorch model (bench/train_bench.py and train_scaling.py time them against each other)."""
from __future__ import annotations

import torch

from demo.reference_model import ConformerCTC, ModelConfig


def make_models(model_cfg: ModelConfig, seed: int = 0) -> dict:
    """{'torch': reference, 'dimtorch': dimtorch model with the reference's weights}."""
    from demo.dimtorch_model import DimtorchConformerCTC
    torch.manual_seed(seed)
    ref = ConformerCTC(model_cfg)
    ours = DimtorchConformerCTC(model_cfg)
    ours.load_reference_state_dict(ref.state_dict())
    return {"torch": ref, "dimtorch": ours}
