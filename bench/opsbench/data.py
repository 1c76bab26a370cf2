"""The benchmark's data, made once per shape set: raw tensors, then the same data as seen by each framework.

Every side exposes the same attribute names (x, y, mask3, time, ...), so a row's implementations read alike.
Padding frames are filled with PAD_VALUE, finite but large enough that any padding leaking into a masked
op changes its result (the agreement check then fails).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from .shapes import ShapeSet

PAD_VALUE = 30.0
EPS = 1e-5
DROPOUT_P = 0.1


def make_raw(shapes: ShapeSet) -> SimpleNamespace:
    """Raw torch tensors (on the shape set's device) and host lengths, from a fixed seed."""
    generator = torch.Generator().manual_seed(0)
    B, T, F, O = shapes.batch, shapes.time, shapes.feature, shapes.out
    H, D, V, K = shapes.heads, shapes.head_dim, shapes.vocab, shapes.conv_kernel

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=generator) * scale

    lengths = torch.tensor(shapes.lengths, dtype=torch.int64)
    mask = torch.arange(T)[None, :] < lengths[:, None]

    def padded(features):
        return torch.where(mask[:, :, None], randn(B, T, features), PAD_VALUE)

    x, y, z = padded(F), padded(F), padded(F)
    raw = SimpleNamespace(
        x=x, y=y, z=z, y_tb=y.transpose(0, 1).contiguous(), bias=randn(F), mask=mask,
        cond=torch.rand(B, T, generator=generator) < 0.5,
        w_fo=randn(F, O, scale=F ** -0.5), w_of=randn(O, F, scale=F ** -0.5), b_o=randn(O),
        ln_w=1.0 + randn(F, scale=0.1), ln_b=randn(F, scale=0.1),
        q=x.view(B, T, H, D).transpose(1, 2).contiguous(), k=y.view(B, T, H, D).transpose(1, 2).contiguous(),
        x4=x.view(B, T, H, D), labels=torch.randint(V, (B, T), generator=generator), emb=randn(V, F),
        conv_w=randn(O, F, K, scale=(F * K) ** -0.5),
    )
    raw.conformer = make_conformer_weights(shapes, randn)
    return _to_device(raw, shapes.device, lengths)


def make_conformer_weights(shapes: ShapeSet, randn) -> dict:
    """Conformer layer weights in torch layout (out, in); layer norms near identity."""
    F, FF, K = shapes.feature, shapes.ff_dim, shapes.conformer_kernel
    weights = {}
    for norm in ("ff1_ln", "att_ln", "conv_ln", "conv_norm", "ff2_ln", "final_ln"):
        weights[norm + "_w"] = 1.0 + randn(F, scale=0.1)
        weights[norm + "_b"] = randn(F, scale=0.1)
    for ff in ("ff1", "ff2"):
        weights.update({ff + "_w1": randn(FF, F, scale=F ** -0.5), ff + "_b1": randn(FF, scale=0.1),
                        ff + "_w2": randn(F, FF, scale=FF ** -0.5), ff + "_b2": randn(F, scale=0.1)})
    for proj in ("q", "k", "v", "o"):
        weights[f"att_w{proj}"] = randn(F, F, scale=F ** -0.5)
        weights[f"att_b{proj}"] = randn(F, scale=0.1)
    weights.update({"conv_pw1_w": randn(2 * F, F, scale=F ** -0.5), "conv_pw1_b": randn(2 * F, scale=0.1),
                    "conv_dw_w": randn(F, 1, K, scale=K ** -0.5),
                    "conv_pw2_w": randn(F, F, scale=F ** -0.5), "conv_pw2_b": randn(F, scale=0.1)})
    return weights


def _to_device(raw: SimpleNamespace, device: str, lengths: torch.Tensor) -> SimpleNamespace:
    moved = SimpleNamespace(**{k: v.to(device) for k, v in vars(raw).items() if isinstance(v, torch.Tensor)})
    moved.conformer = {k: v.to(device) for k, v in raw.conformer.items()}
    moved.lengths = lengths  # lengths stay on the host, as dimtorch and RETURNN keep them
    return moved


def make_torch_side(raw: SimpleNamespace, shapes: ShapeSet) -> SimpleNamespace:
    """What a competent PyTorch user holds: the raws, sizes as ints, and masks built once per batch.

    Masks are made on the device from the lengths, in the shape each op needs, outside the timed region
    (dimtorch and RETURNN cache theirs on the dim).
    """
    side = SimpleNamespace(**vars(raw))
    side.shapes, side.device = shapes, shapes.device
    B, T, F = shapes.batch, shapes.time, shapes.feature
    side.B, side.T, side.F, side.H, side.D = B, T, F, shapes.heads, shapes.head_dim
    lengths = raw.lengths.to(shapes.device)
    positions = torch.arange(T, device=shapes.device)
    side.mask3 = (positions[None, :] < lengths[:, None])[:, :, None]
    side.key_padding4 = ~side.mask3[:, None, None, :, 0]
    side.lengths_col = lengths[:, None].to(torch.float32)
    side.n_valid = lengths.sum().to(torch.float32)
    padded_positions = torch.arange(T + 2, device=shapes.device)
    side.pad_keep3 = (padded_positions[None, :] <= lengths[:, None])[:, :, None]
    side.pad_valid3 = (padded_positions[None, :] < lengths[:, None] + 2)[:, :, None]
    side.conv_padding = shapes.conv_kernel // 2
    side.conformer_padding = shapes.conformer_kernel // 2
    return side


DIM_NAMES = ("batch", "time", "key_time", "feature", "feature2", "out", "heads", "head_dim", "vocab",
             "kernel", "ff", "glu", "conv_channels", "conformer_kernel")


def make_named_side(raw: SimpleNamespace, shapes: ShapeSet, api) -> SimpleNamespace:
    """The same data as named tensors of one framework; `api` says how that framework makes dims and tensors."""
    side = SimpleNamespace(shapes=shapes, device=shapes.device, raw=raw, api=api)
    batch = api.batch_dim(shapes.batch)
    lengths = api.tensor(raw.lengths, (batch,))
    side.batch = batch
    side.lengths = lengths
    side.time = api.dim(lengths, "time")
    side.key_time = api.dim(api.tensor(raw.lengths, (batch,)), "key_time")
    sizes = {"feature": shapes.feature, "feature2": shapes.feature, "out": shapes.out, "heads": shapes.heads,
             "head_dim": shapes.head_dim, "vocab": shapes.vocab, "kernel": shapes.conv_kernel,
             "ff": shapes.ff_dim, "glu": 2, "conv_channels": shapes.feature,
             "conformer_kernel": shapes.conformer_kernel}
    for name, size in sizes.items():
        setattr(side, name, api.dim(size, name))
    side.feat = side.feature
    _add_named_tensors(side, raw, api)
    return side


def _add_named_tensors(side: SimpleNamespace, raw: SimpleNamespace, api) -> None:
    b, t, f, s = side.batch, side.time, side.feature, side.key_time
    h, d = side.heads, side.head_dim
    tensor = api.tensor
    side.x, side.y = tensor(raw.x, (b, t, f)), tensor(raw.y, (b, t, f))
    side.z = tensor(raw.z, (b, t, side.feature2))
    side.y_tb = tensor(raw.y_tb, (t, b, f))
    side.bias = tensor(raw.bias, (f,))
    side.cond = tensor(raw.cond, (b, t))
    side.w_fo = tensor(raw.w_fo, (f, side.out))
    side.w_of, side.b_o = tensor(raw.w_of, (side.out, f)), tensor(raw.b_o, (side.out,))
    side.ln_w, side.ln_b = tensor(raw.ln_w, (f,)), tensor(raw.ln_b, (f,))
    side.q, side.k = tensor(raw.q, (b, h, t, d)), tensor(raw.k, (b, h, s, d))
    side.x4 = tensor(raw.x4, (b, t, h, d))
    side.labels = tensor(raw.labels, (b, t), sparse_dim=side.vocab)
    side.emb = tensor(raw.emb, (side.vocab, f))
    side.conv_w = tensor(raw.conv_w, (side.out, f, side.kernel))
    side.transposed_order = (t, b, f)
