"""The demo's Conformer + CTC (optionally + attention decoder) written with dimtorch: dims made at the model's door.

Same interface and parameters as demo/reference_model.py's ConformerCTC (so train.py can use either
with `--impl`): `loss(features, feature_lengths, targets, target_lengths) -> (loss, CTC logits
(B, T', V+1) raw, out lengths (B,) int64 host)`, `forward`, `blank_index`, and with a DecoderConfig
`aed_greedy_decode` (step by step, with the decoder's state). dt.nn's norm layers name their scale
`scale` where torch says `weight`; `load_reference_state_dict` renames.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

import dimtorch as dt
from demo.aed_decode import GreedyHypotheses
from demo.reference_frontend import FrontendConfig
from demo.reference_model import DecoderConfig, ModelConfig


class DimtorchConformerCTC(dt.nn.Module):
    """dt.nn.ConformerEncoder + dt.nn.Linear to num_labels + 1 classes (blank last); with a
    DecoderConfig also dt.nn.TransformerDecoder over num_labels + 1 classes (EOS = BOS last) and the
    joint loss ctc_scale * CTC + aed_scale * label-smoothed CE (as the reference)."""

    def __init__(self, cfg: ModelConfig = ModelConfig(), decoder: Optional[DecoderConfig] = None,
                 frontend: Optional[FrontendConfig] = None):
        super().__init__()
        self.cfg, self.dec_cfg, self.frontend_cfg = cfg, decoder, frontend
        if frontend is not None and frontend.num_mel != cfg.in_dim:
            raise ValueError(f"DimtorchConformerCTC: frontend num_mel {frontend.num_mel} != model in_dim {cfg.in_dim}")
        self._mask_step = -1 if frontend is None else frontend.mask_steps[0]
        self.in_dim = dt.Dim(cfg.in_dim, name="feature")
        self.model_dim = dt.Dim(cfg.model_dim, name="model")
        self.vocab_dim = dt.Dim(cfg.num_labels + 1, name="vocab")
        self.encoder = dt.nn.ConformerEncoder(
            self.in_dim, self.model_dim, num_layers=cfg.num_layers, ff_dim=dt.Dim(cfg.ff_dim, name="ff"),
            num_heads=cfg.num_heads, conv_kernel_size=cfg.conv_kernel_size,
            subsample_channels=tuple(cfg.subsample_channels), dropout=cfg.dropout, att_dropout=cfg.att_dropout)
        self.output = dt.nn.Linear(self.model_dim, self.vocab_dim)
        if decoder is not None:
            self.aed_vocab_dim = dt.Dim(cfg.num_labels + 1, name="aed_vocab")
            self.decoder = dt.nn.TransformerDecoder(
                self.model_dim, self.aed_vocab_dim, self.model_dim, num_layers=decoder.num_layers,
                ff_dim=dt.Dim(decoder.ff_dim, name="dec_ff"), num_heads=cfg.num_heads, dropout=cfg.dropout,
                att_dropout=cfg.att_dropout)

    @property
    def blank_index(self) -> int:
        return self.cfg.num_labels

    @property
    def eos_index(self) -> int:
        return self.cfg.num_labels

    def set_train_step(self, step: int) -> None:
        """The global training step (SpecAugment's schedule). Kept as the step its stage began at, so that a
        compiled step sees a new value only when the stage changes."""
        if self.frontend_cfg is not None:
            self._mask_step = max((s for s in self.frontend_cfg.mask_steps if s <= step), default=-1)

    def features(self, audio: torch.Tensor, samples: torch.Tensor):
        """Log-mel features of audio (B, S) with `samples` (B,) per sequence: (features over (batch, frames,
        feature), batch, frames); frames per sequence by dim math; SpecAugment in training."""
        c = self.frontend_cfg
        if c is None:
            raise ValueError("DimtorchConformerCTC.features(): this model has no front end (made without a "
                             "FrontendConfig: it takes feature frames)")
        batch = dt.Dim(None, name="batch")
        sample_dim = dt.Dim(dt.Tensor(samples, dims=(batch,)), name="samples")
        x = dt.Tensor(audio, dims=(batch, sample_dim))
        feats, frames = dt.audio.log_mel_filterbank_from_raw(
            x, in_spatial_dim=sample_dim, out_dim=self.in_dim, sampling_rate=c.sample_rate,
            window_len=c.window / c.sample_rate, step_len=c.step / c.sample_rate, n_fft=c.n_fft)
        feats = (feats - c.feature_mean) * (1.0 / c.feature_std)
        if self.training:
            feats = dt.audio.specaugment(feats, spatial_dim=frames, feature_dim=self.in_dim, step=self._mask_step,
                                         steps=c.mask_steps, max_consecutive_spatial_dims=c.max_time_mask,
                                         max_consecutive_feature_dims=c.max_feature_mask, training=True)
        return feats, batch, frames

    def encode(self, features: torch.Tensor, feature_lengths: torch.Tensor):
        """(encoder output over (batch, out_time, model), batch, out_time). features: frames (B, T, F), or with a
        front end audio (B, S) with feature_lengths in samples."""
        if self.frontend_cfg is not None:
            x, batch, time = self.features(features, feature_lengths)
        else:
            batch = dt.Dim(None, name="batch")
            time = dt.Dim(dt.Tensor(feature_lengths, dims=(batch,)), name="time")
            x = dt.Tensor(features, dims=(batch, time, self.in_dim), feature_dim=self.in_dim)
        h, out_time = self.encoder(x, in_spatial_dim=time)
        return h, batch, out_time

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """-> logits (B, T', V+1) raw, out lengths (B,) int64 on the host."""
        h, batch, out_time = self.encode(features, feature_lengths)
        return self.output(h).raw_aligned((batch, out_time, self.vocab_dim)), out_time.lengths.raw

    def loss(self, features, feature_lengths, targets, target_lengths, *, total_labels: Optional[int] = None,
             total_seqs: Optional[int] = None):
        """(loss, CTC logits raw, out lengths host): the CTC loss summed over the batch / target labels
        (at least 1), or with the decoder the joint loss. `total_labels`/`total_seqs`: what the sums are
        divided by, as in the reference's `loss` (default: this batch's)."""
        h, batch, out_time = self.encode(features, feature_lengths)
        logits = self.output(h)
        target_time = dt.Dim(dt.Tensor(target_lengths, dims=(batch,)), name="target_time")
        target = dt.Tensor(targets, dims=(batch, target_time))
        per_seq = dt.ctc_loss(logits=logits, targets=target, input_spatial_dim=out_time,
                              targets_spatial_dim=target_time, blank_index=self.blank_index)
        n_labels = int(target_lengths.sum()) if total_labels is None else total_labels
        loss = per_seq.raw.sum() / max(1, n_labels)
        logits_raw = logits.raw_aligned((batch, out_time, self.vocab_dim))
        if self.dec_cfg is None:
            return loss, logits_raw, out_time.lengths.raw
        labels = dt.Tensor(targets, dims=(batch, target_time), sparse_dim=self.aed_vocab_dim)
        # BOS + labels and labels + EOS at each sequence's own end: both over target_time + 1 (one dim).
        dec_in, (dec_time,) = dt.pad(labels, axes=target_time, padding=(1, 0), value=self.eos_index)
        dec_out, _ = dt.pad(labels, axes=target_time, padding=(0, 1), value=self.eos_index)
        dec_logits, _ = self.decoder(dec_in, spatial_dim=dec_time, encoder=h, enc_spatial_dim=out_time)
        ce = dt.cross_entropy(estimated=dec_logits, target=dec_out, axis=self.aed_vocab_dim,
                              label_smoothing=self.dec_cfg.label_smoothing)
        if total_seqs is None and total_labels is None:
            ce_loss = dt.loss_mean_over_frames(ce).raw
        else:  # the sum over every sequence's labels and EOS, over those of the whole step
            seqs = target_lengths.numel() if total_seqs is None else total_seqs
            ce_loss = dt.reduce_sum(ce, axis=ce.dims).raw / (n_labels + seqs)
        return self.dec_cfg.ctc_scale * loss + self.dec_cfg.aed_scale * ce_loss, logits_raw, out_time.lengths.raw

    @torch.no_grad()
    def aed_greedy_decode(self, features, feature_lengths, max_len_factor: int = 2) -> List[List[int]]:
        """Greedy attention decoding, one step at a time with the decoder's state; sequence b ends at
        EOS or after max_len_factor * (its encoder frames) labels. Reads each step's labels on the host."""
        if self.dec_cfg is None:
            raise ValueError("DimtorchConformerCTC.aed_greedy_decode(): this model has no attention decoder (made "
                             "without a DecoderConfig; train.py --decoder aed makes one)")
        h, batch, out_time = self.encode(features, feature_lengths)
        hyps = GreedyHypotheses(out_time.lengths.raw, self.eos_index, max_len_factor)
        bos = torch.full((features.shape[0],), self.eos_index, dtype=torch.int64, device=features.device)
        labels = dt.Tensor(bos, dims=(batch,), sparse_dim=self.aed_vocab_dim)
        state = None
        for _ in range(hyps.max_steps):
            logits, state = self.decoder(labels, spatial_dim=None, encoder=h, enc_spatial_dim=out_time, state=state)
            labels = dt.reduce_argmax(logits, axis=self.aed_vocab_dim)
            if not hyps.add(labels.raw):
                break
        return hyps.hyps

    def load_reference_state_dict(self, state_dict: dict) -> None:
        """Loads a demo.reference_model.ConformerCTC state dict (torch names) into this model."""
        self.load_state_dict(dt.nn.torch_state_dict_to_dimtorch(self, state_dict))
