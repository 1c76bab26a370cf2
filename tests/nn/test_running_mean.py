"""Tests of dt.nn.RunningMean and dt.nn.ParameterList (RETURNN frontend's): the moving average by hand over valid
frames, training/eval updates, state dict; the list's names, indexing and errors."""
import pytest
import torch

import dimtorch as dt
from helpers import PAD_NAN, make_padded_batch


def test_running_mean_updates_over_valid_frames():
    pb = make_padded_batch((4, 2), feature=3, pad_value=PAD_NAN)
    rm = dt.nn.RunningMean(pb.feature, alpha=0.25)
    out = rm(pb.x)
    valid = pb.x.raw[pb.mask]  # (frames, feature)
    torch.testing.assert_close(out.raw, 0.25 * valid.mean(0))
    assert out.dims == (pb.feature,) and not out.raw.requires_grad
    rm.eval()
    torch.testing.assert_close(rm(pb.x).raw, 0.25 * valid.mean(0))  # no update in eval
    always = dt.nn.RunningMean(pb.feature, alpha=1.0, update_only_in_train=False).eval()
    torch.testing.assert_close(always(pb.x).raw, valid.mean(0))
    assert list(rm.state_dict()) == ["mean"]
    prob = dt.nn.RunningMean(pb.feature, alpha=0.1, is_prob_distribution=True).eval()
    torch.testing.assert_close(prob(pb.x).raw, torch.full((3,), 1 / 3))


def test_running_mean_errors():
    pb = make_padded_batch((2,), feature=3)
    with pytest.raises(ValueError, match=r"RunningMean\(\): alpha must be a number in \[0, 1\]"):
        dt.nn.RunningMean(pb.feature, alpha=2.0)
    rm = dt.nn.RunningMean(dt.Dim(5, name="other"), alpha=0.5)
    with pytest.raises(ValueError, match=r"RunningMean\(\): x lacks the mean's dims \('other'\(5\)\)"):
        rm(pb.x)


def test_parameter_list():
    f, g = dt.Dim(3, name="f"), dt.Dim(2, name="g")
    pl = dt.nn.ParameterList(dt.nn.Parameter((f,), init=1.0), dt.nn.Parameter((g, f)))
    assert len(pl) == 2 and pl.keys() == ["0", "1"] and pl[-1].dims == (g, f) and pl["0"].raw.sum() == 3.0
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"]
    named = dt.nn.ParameterList({"a": dt.nn.Parameter((f,)), "b": dt.nn.Parameter((g,))})
    assert named.keys() == ["a", "b"] and [t.dims for t in named] == [(f,), (g,)]
    named.append(dt.nn.Parameter((f,))).extend([dt.nn.Parameter((g,))])
    assert named.keys() == ["a", "b", "2", "3"]
    copy = dt.nn.ParameterList(named)
    assert copy.keys() == named.keys() and copy["a"].raw is named["a"].raw
    with pytest.raises(TypeError, match=r"ParameterList\(\): expected a dimtorch\.nn\.Parameter"):
        dt.nn.ParameterList(torch.zeros(3))
    with pytest.raises(IndexError, match=r"ParameterList\[\]: index 2 is out of range for 2 parameters"):
        pl[2]
    with pytest.raises(KeyError, match=r"no parameter named 'x'"):
        pl["x"]
