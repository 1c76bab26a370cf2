"""CTC prefix beam search over dims: every sequence of the batch and every hypothesis of its beam at once, one
frame per step, with dimtorch ops (no per-hypothesis Python). The same search as demo/speech/beam.py without a
lexicon and without pruning (tested equal): per frame, each hypothesis (a prefix of labels, its probabilities of
ending in a blank or in a label) may stay (a blank, or its last label again) or grow by one label; a growth
that spells another hypothesis's prefix is merged into that one's stay (its parent is the hypothesis one label
shorter with the same labels); the `beam` best of all stays and growths, ranked over (beam, vocab) together by
dt.top_k, go on. Frames past a sequence's own length leave its beam as it is.

State over (batch, beam): prefix (labels over a static position dim of the longest input's frames), length,
last label (blank when empty), log p ending in blank, log p ending in a label. Reads nothing on the host but
the final best prefixes.
"""
from __future__ import annotations

from typing import List

import torch

import dimtorch as dt

_NEG = float("-inf")


def _cmp(a, b, kind: str):
    """a <kind> b over the union of their dims (an outer broadcast here is meant: e.g. labels x vocab)."""
    return dt.compare(a, b, kind, allow_broadcast_all_sources=True)


def _and(a, b):
    return dt.combine(a, b, "logical_and", allow_broadcast_all_sources=True)


def ctc_prefix_beam_search_dims(logits: torch.Tensor, lengths: torch.Tensor, blank: int, beam: int = 8) -> List[List[int]]:
    """Best label sequence per sequence: logits (B, T, V) raw (any device), lengths (B,) int64 on the host."""
    device = logits.device
    batch = dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
    vocab = dt.Dim(logits.shape[-1], name="vocab")
    beam_dim = dt.Dim(beam, name="beam")
    child = dt.Dim(beam, name="beam_child")  # the same hypotheses, in the role of a merge's child
    n_time = max(1, logits.shape[1])
    pos = dt.Dim(n_time, name="position")
    log_probs = dt.log_softmax(dt.Tensor(logits.float(), dims=(batch, time, vocab)), axis=vocab)
    b = logits.shape[0]
    prefix = dt.Tensor(torch.zeros(b, beam, n_time, dtype=torch.int64, device=device), dims=(batch, beam_dim, pos))
    length = dt.Tensor(torch.zeros(b, beam, dtype=torch.int64, device=device), dims=(batch, beam_dim))
    last = dt.Tensor(torch.full((b, beam), blank, dtype=torch.int64, device=device), dims=(batch, beam_dim),
                     sparse_dim=vocab)
    init = torch.full((b, beam), _NEG, device=device)
    init[:, 0] = 0.0  # one live hypothesis (the empty prefix); the others are dead copies of it
    pb = dt.Tensor(init, dims=(batch, beam_dim))
    pnb = dt.Tensor(torch.full((b, beam), _NEG, device=device), dims=(batch, beam_dim))
    vocab_index = dt.range_over_dim(vocab, device=device)
    pos_index = dt.range_over_dim(pos, device=device)
    is_blank = vocab_index == blank
    lengths_dev = dt.Tensor(lengths.to(device, non_blocking=True), dims=(batch,))
    raw_lp = log_probs.raw_aligned((batch, time, vocab))
    for t in range(logits.shape[1]):
        lp = dt.Tensor(raw_lp[:, t], dims=(batch, vocab))
        total = dt.log_add_exp(pb, pnb)
        stay_b = total + dt.gather(lp, indices=blank, axis=vocab)
        stay_nb = dt.where(length > 0, pnb + dt.gather(lp, indices=last, axis=vocab), _NEG)
        # growth by label c: from a blank ending only when c repeats the last label
        grow = dt.where(_cmp(vocab_index, last, "=="), pb, total) + lp
        grow = dt.where(is_blank, _NEG, grow)  # (batch, beam, vocab)
        # merges: parent p of child c when p is c one label shorter with the same labels
        c_prefix = dt.replace_dim(prefix, in_dim=beam_dim, out_dim=child)[0]
        c_length = dt.replace_dim(length, in_dim=beam_dim, out_dim=child)[0]
        c_last = dt.replace_dim(last, in_dim=beam_dim, out_dim=child)[0]
        same = dt.combine(_cmp(prefix, c_prefix, "=="), _cmp(pos_index, length, ">="), "logical_or",
                          allow_broadcast_all_sources=True)
        # (only live children: the beam's dead slots, -inf copies, may share a live hypothesis's prefix)
        c_live = dt.replace_dim(total, in_dim=beam_dim, out_dim=child)[0] > _NEG
        is_parent = _and(_and(dt.reduce_all(same, axis=pos), _cmp(length + 1, c_length, "==")), c_live)  # (batch, beam, child)
        into_child = dt.where(is_parent, dt.gather(grow, indices=c_last, axis=vocab), _NEG)
        stay_nb = dt.log_add_exp(stay_nb, dt.replace_dim(dt.reduce_logsumexp(into_child, axis=beam_dim),
                                                         in_dim=child, out_dim=beam_dim)[0])
        merged = dt.reduce_any(_and(is_parent, _cmp(c_last, vocab_index, "==")), axis=child)  # (batch, beam, vocab)
        grow = dt.where(merged, _NEG, grow)
        # candidates over (beam, vocab): vocab == blank stands for the hypothesis's stay
        stay = dt.log_add_exp(stay_b, stay_nb)
        score = dt.where(is_blank, stay, grow)
        _, (parent, label), k_dim = dt.top_k(score, axis=(beam_dim, vocab), k=beam)
        stays = label == blank
        p_prefix = dt.gather(prefix, indices=parent, axis=beam_dim)
        p_length = dt.gather(length, indices=parent, axis=beam_dim)
        new_prefix = dt.where(dt.combine(stays, _cmp(pos_index, p_length, "!="), "logical_or", allow_broadcast_all_sources=True),
                              p_prefix, dt.cast(label, "int64"))
        new_length = dt.where(stays, p_length, p_length + 1)
        new_last = dt.where(stays, dt.gather(last, indices=parent, axis=beam_dim), label)
        new_pb = dt.where(stays, dt.gather(stay_b, indices=parent, axis=beam_dim), _NEG)
        p_grow = dt.gather(dt.gather(grow, indices=parent, axis=beam_dim), indices=label, axis=vocab)
        new_pnb = dt.where(stays, dt.gather(stay_nb, indices=parent, axis=beam_dim), p_grow)
        live = lengths_dev > t  # frames past a sequence's end keep its beam
        to_beam = lambda x: dt.replace_dim(x, in_dim=k_dim, out_dim=beam_dim)[0]  # noqa: E731
        prefix = dt.where(live, to_beam(new_prefix), prefix)
        length = dt.where(live, to_beam(new_length), length)
        last = dt.Tensor(dt.where(live, to_beam(new_last), last).raw_aligned((batch, beam_dim)), dims=(batch, beam_dim),
                         sparse_dim=vocab)
        pb = dt.where(live, to_beam(new_pb), pb)
        pnb = dt.where(live, to_beam(new_pnb), pnb)
    best = dt.reduce_argmax(dt.log_add_exp(pb, pnb), axis=beam_dim)
    best_prefix = dt.gather(prefix, indices=best, axis=beam_dim).raw_aligned((batch, pos)).cpu()
    best_length = dt.gather(length, indices=best, axis=beam_dim).raw_aligned((batch,)).cpu()
    return [best_prefix[i, :n].tolist() for i, n in enumerate(best_length.tolist())]


__all__ = ["ctc_prefix_beam_search_dims"]
