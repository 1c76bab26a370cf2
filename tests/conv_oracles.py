"""Per-sequence oracles of the conv tests (tests/ops/test_conv*.py, test_transposed_conv.py): each
sequence run alone through torch, and the batch's result compared with it."""
import torch
import torch.nn.functional as F

import dimtorch as dt


def ceildiv(a, b):
    return -(-a // b)


def per_sequence(raw, lengths, fn, out_lengths, n_out, c):
    """Oracle over raw (batch, time, feat): fn(sequence (1, feat, n)) -> (1, c, m) for each sequence
    alone, its first out_lengths[b] frames kept, zero padded up to n_out; -> (batch, c, n_out)."""
    outs = []
    for b, (n, m) in enumerate(zip(lengths, out_lengths)):
        if m == 0:
            outs.append(raw.new_zeros((c, n_out)))
            continue
        o = fn(raw[b:b + 1, :n].transpose(1, 2))[0, :, :m]
        outs.append(F.pad(o, (0, n_out - m)))
    return torch.stack(outs)


def make_filter(out_dim, in_dim, ks, seed=1):
    g = torch.Generator().manual_seed(seed)
    return dt.Tensor(torch.randn(out_dim.size, in_dim.size, *[k.size for k in ks], generator=g) * 0.3,
                     (out_dim, in_dim) + tuple(ks))


def lone_sequence(x, batch, time, b, n):
    b1 = dt.Dim(None, name="b1")
    t1 = dt.Dim(dt.Tensor(torch.tensor([n]), (b1,)), name="t1")
    m = {id(batch): b1, id(time): t1}
    raw = x.raw.narrow(x.dims.index(batch), b, 1).narrow(x.dims.index(time), 0, n)
    return dt.Tensor(raw, tuple(m.get(id(d), d) for d in x.dims)), b1, t1


def check_lone_sequences(fn, x, batch, time, lengths):
    """fn(x, batch, time) -> (out, out_time) over (batch, ..., out_time) dims in some order: each
    sequence alone gives the same length and the same valid frames as inside the batch."""
    full, ot = fn(x, batch, time)
    out_lens = ot.lengths.raw.tolist()
    for b, n in enumerate(lengths):
        xb, b1, t1 = lone_sequence(x, batch, time, b, n)
        one, ot1 = fn(xb, b1, t1)
        assert ot1.lengths.raw.tolist() == [out_lens[b]], (b, n)
        back = {id(b1): batch, id(ot1): ot}
        order = tuple(back.get(id(d), d) for d in one.dims)
        expected = full.raw_aligned(order).narrow(order.index(batch), b, 1).narrow(order.index(ot), 0, out_lens[b])
        torch.testing.assert_close(one.raw, expected, msg=lambda s: f"sequence {b} (length {n}): {s}")
