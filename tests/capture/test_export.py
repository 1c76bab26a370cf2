"""make_fx (symbolic), torch.export and torch.jit.trace of dimtorch modules whose time dim is made
from lengths given as inputs: the traced graph takes any batch and padded size and equals eager."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import dimtorch as dt
from compile_helpers import assert_same, padded


class Encoder(torch.nn.Module):
    """A Conformer layer and a masked mean over time, from raws: dims made inside from the lengths."""

    def __init__(self, feature: dt.Dim):
        super().__init__()
        self.feature = feature
        self.layer = dt.nn.ConformerEncoderLayer(feature, num_heads=2, conv_kernel_size=3, dropout=0.0,
                                                 att_dropout=0.0)

    def forward(self, raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
        x = dt.Tensor(raw, dims=(batch, time, self.feature))
        y = self.layer(x, spatial_dim=time)
        return dt.reduce_mean(y, axis=time).raw, y.copy_masked(0.0).raw_aligned((batch, time, self.feature))


def _model():
    torch.manual_seed(0)
    return Encoder(dt.Dim(4, name="feature")).eval()


def _inputs(lengths, seed=0):
    return padded(lengths, 4, pad=float("nan"), seed=seed)


def test_make_fx_symbolic_takes_other_sizes():
    model = _model()
    graph = make_fx(model, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*_inputs([7, 5, 2]))
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 2  # raw and lengths: no lengths baked in as constants
    for lengths in ([9, 3], [4, 4, 1, 2], [6, 6, 6]):
        raw, lens = _inputs(lengths, seed=len(lengths))
        assert_same(graph(raw, lens), model(raw, lens), what=str(lengths))


def test_export_with_dynamic_batch_and_time():
    model = _model()
    batch, time = torch.export.Dim("batch", min=2, max=64), torch.export.Dim("time", min=2, max=512)
    program = torch.export.export(model, _inputs([7, 5, 2]), strict=False,
                                  dynamic_shapes={"raw": {0: batch, 1: time}, "lengths": {0: batch}})
    raw_meta = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder"][-2]
    assert not isinstance(raw_meta.shape[1], int)  # the time dim is symbolic
    exported = program.module()
    for lengths in ([9, 3], [4, 4, 1, 2], [12, 2, 7]):
        raw, lens = _inputs(lengths, seed=len(lengths))
        assert_same(exported(raw, lens), model(raw, lens), what=str(lengths))
    # The model's parameter views were not cached from export's stand-in (fake) parameters.
    for m in model.modules():
        for _, raw, _ in m.__dict__.get("_dt_views", {}).values():
            assert type(raw) in (torch.Tensor, torch.nn.Parameter)


def test_jit_trace_is_refused_with_the_alternatives():
    model = _model()
    with pytest.raises(RuntimeError, match="torch.jit.trace is not supported.*torch.export.export.*torch.compile"):
        torch.jit.trace(model, _inputs([7, 5, 2]), check_trace=False)


class Recurrent(torch.nn.Module):
    """A ZoneoutLSTM (a loop over frames) over the batch made from the raws."""

    def __init__(self):
        super().__init__()
        self.feature = dt.Dim(4, name="feature")
        self.lstm = dt.nn.ZoneoutLSTM(self.feature, dt.Dim(5, name="out"), zoneout_factor_cell=0.2)

    def forward(self, raw, lengths):
        batch = dt.Dim(None, name="batch")
        time = dt.Dim(dt.Tensor(lengths, dims=(batch,)), name="time")
        y, state = self.lstm(dt.Tensor(raw, dims=(batch, time, self.feature)), spatial_dim=time)
        return y.copy_masked(0.0).raw, state.h.raw, state.c.raw


def test_export_of_a_frame_loop_takes_any_length():
    """The frame loop is exported as one torch scan over the symbolic time size."""
    torch.manual_seed(0)
    model = Recurrent().eval()
    batch, time = torch.export.Dim("batch", min=2, max=64), torch.export.Dim("time", min=2, max=512)
    program = torch.export.export(model, _inputs([7, 5, 2]), strict=False,
                                  dynamic_shapes={"raw": {0: batch, 1: time}, "lengths": {0: batch}})
    assert any("scan" in str(n.target) for n in program.graph.nodes)
    exported = program.module()
    for lengths in ([9, 3], [4, 4, 1, 2], [12, 2, 7]):
        raw, lens = _inputs(lengths, seed=len(lengths))
        assert_same(exported(raw, lens), model(raw, lens), what=str(lengths))
    torch._dynamo.reset()  # torch's scan compiles its body with Dynamo, whose cache holds the layer


def test_make_fx_of_a_frame_loop():
    """Symbolic make_fx would fix the traced length in an unrolled loop (torch's scan does not trace
    there): a clear error naming what works. Fake tracing unrolls it for the traced length."""
    torch.manual_seed(0)
    model = Recurrent().eval()
    with pytest.raises(RuntimeError, match=r"ZoneoutLSTM\(\): make_fx\(tracing_mode='symbolic'\) cannot trace"):
        make_fx(model, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*_inputs([7, 5, 2]))
    graph = make_fx(model, tracing_mode="fake", _allow_non_fake_inputs=True)(*_inputs([7, 5, 2]))
    raw, lens = _inputs([6, 7, 1], seed=1)
    assert_same(graph(raw, lens), model(raw, lens))
