"""In-graph forms of cross_entropy, ctc_loss and loss_mean_over_frames, and the opaque CTC op dimtorch::ctc_loss they trace."""
import pytest
import torch
import torch.nn.functional as F

import dimtorch as dt
from dimtorch.ops import ctc_op as _ctc_op
from dimtorch.ops.loss import cross_entropy, ctc_loss, loss_mean_over_frames
from in_graph_helpers import check_alone_in_graph, check_in_graph, padded_env, run_meta_in_graph, with_order

ORDERS = [(0, 1, 2), (1, 0, 2), (2, 1, 0)]
TOL = dict(atol=1e-5, rtol=1e-5)


def _env(order):
    env = with_order(padded_env((5, 3, 0, 2), extra_time=2, feature=4), "x", order)
    b, t, f = env["batch"], env["time"], env["feature"]
    gen = torch.Generator().manual_seed(2)
    tgt = torch.randint(0, 4, (4, 7), generator=gen)
    tgt[0, 5:], tgt[1, 3:] = 99, -5  # out of range in the padding: never read
    env["tgt"] = dt.Tensor(tgt, (b, t), sparse_dim=f)
    env["probs"] = dt.Tensor(torch.softmax(torch.randn(4, 7, 4, generator=gen), -1), (b, t, f))
    env["labels_time"] = lt = dt.Dim(dt.Tensor(torch.tensor([2, 1, 0, 1]), (b,)), name="labels_time")
    labels = torch.randint(0, 3, (4, 3), generator=gen)
    labels[0, 2:] = 77
    env["labels"] = dt.Tensor(labels, (b, lt))
    return env


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("estimated_type", ["logits", "log-probs", "probs"])
def test_cross_entropy_index_targets(order, estimated_type):
    env = _env(order)

    def fn(e):
        est = {"logits": e["x"], "log-probs": dt.log_softmax(e["x"], axis=e["feature"]),
               "probs": dt.softmax(e["x"], axis=e["feature"])}[estimated_type]
        return cross_entropy(estimated=est, target=e["tgt"], axis=e["feature"], estimated_type=estimated_type,
                             label_smoothing=0.1 if estimated_type == "logits" else 0.0)

    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)
    run_meta_in_graph(fn, env)


@pytest.mark.parametrize("order", ORDERS)
def test_cross_entropy_probability_targets_and_mean_over_frames(order):
    env = _env(order)
    fn = lambda e: cross_entropy(estimated=e["x"], target=e["probs"], axis=e["feature"])  # noqa: E731
    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)
    run_meta_in_graph(fn, env)
    mean = lambda e: loss_mean_over_frames(cross_entropy(estimated=e["x"], target=e["tgt"],  # noqa: E731
                                                         axis=e["feature"]))
    check_in_graph(mean, env, **TOL)
    run_meta_in_graph(mean, env)


@pytest.mark.parametrize("order", ORDERS)
def test_ctc_loss(order):
    env = _env(order)
    fn = lambda e: ctc_loss(logits=e["x"], targets=e["labels"], input_spatial_dim=e["time"],  # noqa: E731
                            targets_spatial_dim=e["labels_time"], blank_index=3)
    check_in_graph(fn, env, **TOL)
    check_alone_in_graph(fn, env, **TOL)
    run_meta_in_graph(fn, env)
    mean = lambda e: loss_mean_over_frames(fn(e), frames_dim=e["labels_time"])  # noqa: E731
    check_in_graph(mean, env, **TOL)
    run_meta_in_graph(mean, env)


def test_ctc_loss_general_path_with_two_batch_dims():
    env = _env((0, 1, 2))
    beam = dt.Dim(2, name="beam")

    def fn(e):
        x = e["x"].raw_aligned((e["batch"], e["time"], e["feature"]))
        logits = dt.Tensor(x.unsqueeze(0).expand(2, -1, -1, -1), (beam, e["batch"], e["time"], e["feature"]))
        targets = dt.Tensor(e["labels"].raw.unsqueeze(0).expand(2, -1, -1), (beam,) + e["labels"].dims)
        return ctc_loss(logits=logits, targets=targets, input_spatial_dim=e["time"],
                        targets_spatial_dim=e["labels_time"], blank_index=3)

    check_in_graph(fn, env, **TOL)
    run_meta_in_graph(fn, env)


def _ctc_inputs(T=7):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, 3, 5, generator=gen, requires_grad=True)
    targets = torch.randint(0, 4, (3, 3), generator=gen)
    return x, targets, torch.tensor([T, 5, 0]), torch.tensor([3, 2, 0])


def test_ctc_op_is_torch_ctc_loss_forward_and_backward():
    x, targets, il, tl = _ctc_inputs()
    got = _ctc_op.ctc_loss(x.log_softmax(-1), targets, il, tl, 4, True)
    want = F.ctc_loss(x.log_softmax(-1), targets, il, tl, blank=4, reduction="none", zero_infinity=True)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])
    torch.library.opcheck(_ctc_op.ctc_loss, (x.log_softmax(-1).detach().requires_grad_(), targets, il, tl, 4, True))


def test_ctc_op_compiles_in_one_graph_with_dynamic_shapes():
    """F.ctc_loss with length tensors breaks torch.compile's graph in torch 2.13; the op does not."""
    def fn(x, targets, il, tl):
        return _ctc_op.ctc_loss(x.log_softmax(-1), targets, il, tl, 4, True)

    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="aot_eager")
    for T in (7, 9):
        x, targets, il, tl = _ctc_inputs(T)
        got = compiled(x, targets, il, tl)
        want = F.ctc_loss(x.log_softmax(-1), targets, il, tl, blank=4, reduction="none", zero_infinity=True)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])
