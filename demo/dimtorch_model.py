"""The demo's Conformer + CTC written with dimtorch: dims are made at the model's door from the host lengths.

Same interface and parameters as demo/reference_model.py's ConformerCTC (so train.py can use either
with `--impl`): `loss(features, feature_lengths, targets, target_lengths) -> (loss per target label,
logits (B, T', V+1) raw, out lengths (B,) int64 host)`, `forward`, `blank_index`. dt.nn's norm
layers name their scale `scale` where torch says `weight`; `load_reference_state_dict` renames.
"""
from __future__ import annotations

from typing import Tuple

import torch

import dimtorch as dt
from demo.reference_model import ModelConfig


class DimtorchConformerCTC(dt.nn.Module):
    """dt.nn.ConformerEncoder + dt.nn.Linear to num_labels + 1 classes (blank last)."""

    def __init__(self, cfg: ModelConfig = ModelConfig()):
        super().__init__()
        self.cfg = cfg
        self.in_dim = dt.Dim(cfg.in_dim, name="feature")
        self.model_dim = dt.Dim(cfg.model_dim, name="model")
        self.vocab_dim = dt.Dim(cfg.num_labels + 1, name="vocab")
        self.encoder = dt.nn.ConformerEncoder(
            self.in_dim, self.model_dim, num_layers=cfg.num_layers, ff_dim=dt.Dim(cfg.ff_dim, name="ff"),
            num_heads=cfg.num_heads, conv_kernel_size=cfg.conv_kernel_size,
            subsample_channels=tuple(cfg.subsample_channels), dropout=cfg.dropout, att_dropout=cfg.att_dropout)
        self.output = dt.nn.Linear(self.model_dim, self.vocab_dim)

    @property
    def blank_index(self) -> int:
        return self.cfg.num_labels

    def encode(self, features: torch.Tensor, feature_lengths: torch.Tensor):
        """Named logits and their dims: (logits over (batch, out_time, vocab), batch, out_time)."""
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(feature_lengths, dims=(batch,)), name="time")
        x = dt.Tensor(features, dims=(batch, time, self.in_dim), feature_dim=self.in_dim)
        h, out_time = self.encoder(x, in_spatial_dim=time)
        return self.output(h), batch, out_time

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """-> logits (B, T', V+1) raw, out lengths (B,) int64 on the host."""
        logits, batch, out_time = self.encode(features, feature_lengths)
        return logits.raw_aligned((batch, out_time, self.vocab_dim)), out_time.dyn_size.raw

    def loss(self, features, feature_lengths, targets, target_lengths):
        """(CTC loss summed over the batch / target labels (at least 1), logits raw, out lengths host)."""
        logits, batch, out_time = self.encode(features, feature_lengths)
        target_time = dt.Dim(dt.Tensor(target_lengths, dims=(batch,)), name="target_time")
        target = dt.Tensor(targets, dims=(batch, target_time))
        per_seq = dt.ctc_loss(logits=logits, targets=target, input_spatial_dim=out_time,
                              targets_spatial_dim=target_time, blank_index=self.blank_index)
        loss = per_seq.raw.sum() / max(1, int(target_lengths.sum()))
        return loss, logits.raw_aligned((batch, out_time, self.vocab_dim)), out_time.dyn_size.raw

    def load_reference_state_dict(self, state_dict: dict) -> None:
        """Loads a demo.reference_model.ConformerCTC state dict (torch names) into this model."""
        self.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(self, state_dict))
