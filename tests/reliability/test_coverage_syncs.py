"""The part-B ops of RETURNN-frontend coverage that a training step uses read nothing from the device.

They run through bench/check_syncs.py's passes on the "meta" device, where any read of device values
(.item(), bool(), nonzero, a copy back to the host) raises, and its CopyCounter refuses blocking
host-to-device copies (and any copy once the dims' device copies are cached). ctc_greedy_decode,
gather_nested of dims with lengths over the gathered dim, scan with cond, while_loop and cond read data
by necessity (their docstrings say so) and are not here.
"""
import pytest
import torch

import dimtorch as dt
from sync_checks import check_syncs as _check_syncs


def _heads(s):
    h, d = dt.Dim(2, name="h"), dt.Dim(4, name="d")
    return dt.split_dims(s.x, axis=s.feat, dims=(h, d)), d


def _attention(s, causal):
    q, d = _heads(s)
    return dt.dot_attention(q, q, q, key_dim=d, axis=s.time, causal_query_spatial_dim=causal)


def _scan(s):
    def body(x_t, h):
        h = dt.tanh(x_t + h)
        return h, h

    h0 = dt.zeros_like(s.bias)
    h0 = dt.Tensor(h0.raw.expand(4, -1), (s.batch, s.feat))
    return list(dt.scan(spatial_dim=s.time, initial=h0, xs=s.x, ys=h0, body=body)[:2])


def _ctc_targets(s):
    """Labels 1 over (batch, other), made on the device."""
    return dt.Tensor(torch.ones(4, 3, dtype=torch.int64, device=s.device), (s.batch, s.other), sparse_dim=s.feat)


def _stft(s):
    return dt.stft(s.x, in_spatial_dim=s.time, frame_step=1, frame_length=2)[0]


OPS = [
    ("dot_attention", lambda s: [_attention(s, None)]),
    ("dot_attention causal", lambda s: [_attention(s, s.time)]),
    ("sinusoidal_positional_encoding", lambda s: [dt.sinusoidal_positional_encoding(
        spatial_dim=s.time, feat_dim=s.feat, device=s.device)]),
    ("relative_positional_encoding", lambda s: [dt.relative_positional_encoding(
        query_spatial_dim=s.time, key_value_spatial_dim=s.time, feat_dim=s.feat, device=s.device)[0]]),
    ("relative_positional_encoding step", lambda s: [dt.relative_positional_encoding(
        query_spatial_dim=None, key_value_spatial_dim=s.time, feat_dim=s.feat, device=s.device)[0]]),
    ("apply_rope", lambda s: [dt.apply_rope(s.x, dt.sinusoidal_positional_encoding(
        spatial_dim=s.time, feat_dim=s.feat, device=s.device), s.feat)]),
    ("scan over time", _scan),
    ("stft", lambda s: [dt.abs(_stft(s))]),
    ("log_mel_filterbank_from_raw", lambda s: [dt.audio.log_mel_filterbank_from_raw(
        dt.Tensor(s.x.raw[..., 0], (s.batch, s.time)), in_spatial_dim=s.time, out_dim=dt.Dim(3, name="mel"),
        sampling_rate=100, step_len=0.01)[0]]),
    ("safe_log", lambda s: [dt.safe_log(s.x, eps=1e-6)]),
    ("gating", lambda s: [dt.gating(s.x, axis=s.feat)[0]]),
    ("normalize", lambda s: [dt.normalize(s.x, axis=[s.time, s.feat])]),
    ("cum_concat_step", lambda s: [dt.cum_concat_step(dt.reduce_sum(s.x, axis=s.time), prev_accum=s.x,
                                                      axis=s.time)[0]]),
    ("edit_distance", lambda s: [dt.edit_distance(dt.cast(s.x > 0.0, "int64"), s.time,
                                                  dt.cast(s.x_static > 0.0, "int64"), s.static_time)]),
    ("where_nested / mask_nested", lambda s: [*dt.where_nested((s.x, s.att), (s.x * 2.0, s.att), condition=s.att > 0.0),
                                              dt.mask_nested(s.x, mask=s.att > 0.0, mask_value=0.0)]),
    ("last_frame_position_of_dim", lambda s: [dt.last_frame_position_of_dim(s.time, device=s.device)]),
    ("ctc_best_path", lambda s: [dt.ctc_best_path(logits=s.x, targets=_ctc_targets(s), input_spatial_dim=s.time,
                                                  targets_spatial_dim=s.other, blank_index=0)]),
    ("ctc_durations_from_path", lambda s: [dt.ctc_durations_from_path(
        path=dt.cast(s.att > 0.0, "int64"), path_spatial_dim=s.time, blank_index=0, targets_spatial_dim=s.other)[0],
        dt.ctc_no_label_loop_blank_durations_from_path(
        path=dt.cast(s.att > 0.0, "int64"), path_spatial_dim=s.time, blank_index=0, targets_spatial_dim=s.other)[0]]),
    ("window", lambda s: [dt.window(s.x, spatial_dim=s.time, window_dim=dt.Dim(3, name="w"), stride=2)[0]]),
    ("specaugment", lambda s: [dt.audio.specaugment(s.x, spatial_dim=s.time, feature_dim=s.feat, step=5000,
                                                    num_spatial_mask_factor=2, max_consecutive_spatial_dims=2)]),
    ("pool with int padding", lambda s: [dt.pool(s.x, mode="avg", pool_size=3, padding=1, in_spatial_dims=s.time)[0]]),
]


@pytest.mark.parametrize("name", [n for n, _ in OPS])
def test_no_device_reads_on_meta(name):
    mod = _check_syncs()
    ops = [(n, f) for n, f in OPS if n == name]
    device = torch.device("meta")
    warm = mod.Setup(dt, device)
    for pass_name, setup in (("warm-up", warm), ("steady", warm), ("first use", mod.Setup(dt, device))):
        results = mod.run_pass(pass_name, ops, setup, pass_name != "warm-up", False, True)
        assert results[name] is None, f"{name} [{pass_name}]: {results[name]}"
