"""Errors a user can act on: different Dims of one name are told apart in messages (and named as
the cause), and torch's dim=/keepdim= keywords get a hint."""
import re

import pytest
import torch

import dimtorch as dt
from dimtorch._core.errors import torch_keyword_hint
from dimtorch.ops import elementwise, matmul, reduce


def _two_features():
    batch = dt.Dim(None, name="batch")
    f1, f2 = dt.Dim(80, name="feature"), dt.Dim(80, name="feature")
    x = dt.Tensor(torch.randn(3, 80), dims=(batch, f1))
    y = dt.Tensor(torch.randn(3, 80), dims=(batch, f2))
    return batch, f1, f2, x, y


def _ids(message: str) -> set:
    return set(re.findall(r"feature'?(?:\(80\)|:80)(#\d+)", message))


@pytest.mark.parametrize("call", [lambda x, y: x + y, lambda x, y: dt.combine(x, y, "add"),
                                  lambda x, y: elementwise.combine(x, y, "add")])
def test_outer_broadcast_of_namesakes_says_so_and_does_not_suggest_broadcasting(call):
    _, f1, f2, x, y = _two_features()
    with pytest.raises(ValueError) as info:
        call(x, y)
    msg = str(info.value)
    assert "different Dim objects with the same name" in msg
    assert "allow_broadcast_all_sources" not in msg
    assert _ids(msg) == {f1._message_id, f2._message_id}  # both told apart, by stable ids


def test_outer_broadcast_without_namesakes_still_suggests_broadcasting():
    batch, time, feat = dt.Dim(None, name="batch"), dt.Dim(5, name="time"), dt.Dim(4, name="feature")
    a = dt.Tensor(torch.randn(3, 5), dims=(batch, time))
    b = dt.Tensor(torch.randn(3, 4), dims=(batch, feat))
    with pytest.raises(ValueError, match="allow_broadcast_all_sources") as info:
        a + b
    assert "#" not in str(info.value) and "same name" not in str(info.value)


@pytest.mark.parametrize("call", [
    lambda x, y, f1, f2: dt.reduce_sum(x, axis=f2), lambda x, y, f1, f2: reduce.reduce_sum(x, axis=f2),
    lambda x, y, f1, f2: dt.matmul(x, y, reduce=f1), lambda x, y, f1, f2: matmul.matmul(x, y, reduce=f1),
    lambda x, y, f1, f2: x.raw_aligned((x.dims[0], f2)), lambda x, y, f1, f2: x.copy_transpose((x.dims[0], f2)),
    lambda x, y, f1, f2: x.remaining_dims(f2), lambda x, y, f1, f2: x.get_axis(f2),
    lambda x, y, f1, f2: dt.dropout(x, 0.5, axis=f2, training=True)])
def test_dim_not_found_because_of_a_namesake(call):
    _, f1, f2, x, y = _two_features()
    with pytest.raises(ValueError) as info:
        call(x, y, f1, f2)
    msg = str(info.value)
    assert "different Dim objects with the same name" in msg
    assert {f1._message_id, f2._message_id} <= _ids(msg) | set(re.findall(r"#\d+", msg))


def test_fast_path_and_definition_give_the_same_message():
    _, f1, f2, x, y = _two_features()
    for fast, definition in [(lambda: dt.reduce_sum(x, axis=f2), lambda: reduce.reduce_sum(x, axis=f2)),
                             (lambda: dt.matmul(x, y, reduce=f1), lambda: matmul.matmul(x, y, reduce=f1)),
                             (lambda: dt.combine(x, y, "add"), lambda: elementwise.combine(x, y, "add"))]:
        with pytest.raises(ValueError) as a:
            fast()
        with pytest.raises(ValueError) as b:
            definition()
        assert str(a.value) == str(b.value)


def test_ids_are_stable_and_only_shown_on_a_collision():
    _, f1, f2, x, _ = _two_features()
    assert f1._message_id == f1._message_id != f2._message_id
    assert "#" not in repr(f1) and "#" not in repr(x)
    both = dt.Tensor(torch.zeros(80, 80), dims=(f1, f2))
    assert f1._message_id in repr(both) and f2._message_id in repr(both)


@pytest.mark.parametrize("call, hint", [
    (lambda x, f: dt.reduce_sum(x, dim=f), "use axis="),
    (lambda x, f: dt.reduce_mean(x, axis=f, keepdim=True), "no keepdim"),
    (lambda x, f: dt.softmax(x, dim=f), "use axis="),
    (lambda x, f: reduce.softmax(x, dim=f), "use axis="),
    (lambda x, f: dt.matmul(x, x, dim=f), "use reduce="),
    (lambda x, f: dt.pad(x, dim=f, padding=(1, 1)), "by its Dim"),
])
def test_torch_keywords_get_a_hint(call, hint):
    _, f1, _, x, _ = _two_features()
    with pytest.raises(TypeError) as info:
        call(x, f1)
    msg = str(info.value)
    assert msg.startswith("dimtorch.") and hint in msg


def test_other_unknown_keywords_get_no_hint():
    _, f1, _, x, _ = _two_features()
    with pytest.raises(TypeError) as info:
        dt.reduce_sum(x, axis=f1, bogus=1)
    assert "got an unexpected keyword argument 'bogus'" in str(info.value)
    assert "(dimtorch" not in str(info.value)


@pytest.mark.parametrize("use_definition", [False, True])
def test_linear_weight_over_a_namesake_of_the_input_dim(use_definition):
    batch, f1, f2, x, _ = _two_features()
    out = dt.Dim(4, name="out")
    w = dt.Tensor(torch.randn(80, 4), dims=(f2, out))
    with pytest.raises(ValueError) as info:
        (matmul.linear if use_definition else dt.linear)(x, w)
    assert "different Dim objects with the same name" in str(info.value)
    assert {f1._message_id, f2._message_id} <= set(re.findall(r"#\d+", str(info.value)))


@pytest.mark.parametrize("use_definition", [False, True])
def test_lengths_over_a_namesake_of_the_batch_dim(use_definition):
    batch1, batch2 = dt.Dim(None, name="batch"), dt.Dim(None, name="batch")
    time = dt.Dim(dt.Tensor(torch.tensor([3, 2]), dims=(batch1,)), name="time")
    x = dt.Tensor(torch.randn(2, 3), dims=(batch2, time))
    with pytest.raises(ValueError) as info:
        (reduce.reduce_sum if use_definition else dt.reduce_sum)(x, axis=time)
    msg = str(info.value)
    assert "which the tensor lacks" in msg and "different Dim objects with the same name" in msg, msg
    assert {batch1._message_id, batch2._message_id} <= set(re.findall(r"#\d+", msg))


# Left out: ops whose own parameter is called `dim` (dim= is right there; found by signature) and C++
# unary ops ("takes no keyword arguments"). Ops that take user callables name only the errors of
# binding their own arguments (tested below: the user's errors are the user's).
_TAKE_CALLABLES = {"cond", "scan", "while_loop"}
# Hot ops without a Python wrapper: their public name is a function of _C (a fast path, or the
# definition called from C: DIMTORCH_DEFINITION_ONLY), which names the error on the error path only.
_HOT = ("conv", "transposed_conv", "pool", "cumsum", "squeeze", "one_hot")


def test_every_public_op_with_keywords_hints_at_dim():
    """dim= on any public op: a TypeError that names the call and says what to use instead."""
    import inspect
    from dimtorch._op_table import OPS

    def has_own_dim(op):
        try:
            return "dim" in inspect.signature(op.definition).parameters
        except (TypeError, ValueError):
            return False
    for name in sorted(set(OPS) - _TAKE_CALLABLES - {n for n, op in OPS.items() if has_own_dim(op)}):
        with pytest.raises(TypeError) as info:
            getattr(dt, name)(None, dim=1)
        msg = str(info.value)
        if "takes no keyword arguments" in msg:
            continue
        assert msg.startswith(f"dimtorch.{name}()") and "(dimtorch names an axis by its Dim" in msg, msg


@pytest.mark.parametrize("name, hint", [("conv", "in_spatial_dims"), ("transposed_conv", "in_spatial_dims"),
                                        ("pool", "in_spatial_dims"),
                                        ("cumsum", "axis"), ("squeeze", "axis")])
def test_hot_ops_hint_at_their_own_keyword_at_no_cost_per_call(name, hint):
    """The hot ops give the hint of the keyword to use, as the wrapped ops do, from C (no wrapper frame)."""
    from dimtorch._op_table import OPS
    assert name in _HOT and type(getattr(dt, name)).__name__ == "builtin_function_or_method"
    with pytest.raises(TypeError) as fast:
        getattr(dt, name)(None, dim=1)
    assert str(fast.value) == (f"dimtorch.{name}(): {name}() got an unexpected keyword argument 'dim' (dimtorch "
                               f"names an axis by its Dim, not a number: use {hint}=)")
    assert str(fast.value).endswith(torch_keyword_hint(f"{name}() got an unexpected keyword argument 'dim'",
                                                       OPS[name].definition))


@pytest.mark.parametrize("name", sorted(_TAKE_CALLABLES))
def test_ops_that_run_user_code_hint_at_dim_and_leave_the_users_errors_alone(name):
    with pytest.raises(TypeError, match=rf"^dimtorch\.{name}\(\): .*names an axis by its Dim"):
        getattr(dt, name)(dim=1)

    def body(*args, **kwargs):
        raise TypeError("the body's own error")
    calls = {"cond": lambda: dt.cond(True, body, body), "while_loop": lambda: dt.while_loop(body, body, ()),
             "scan": lambda: dt.scan(spatial_dim=dt.Dim(2, name="t"), initial=(), xs=(), body=body)}
    with pytest.raises(TypeError, match=r"^the body's own error$") as info:
        calls[name]()
    assert info.traceback[-1].name == "body"  # the user's traceback is kept


@pytest.mark.parametrize("name", ["mel_filterbank", "log_mel_filterbank_from_raw", "mel_filterbank_matrix"])
def test_audio_functions_name_the_call(name):
    with pytest.raises(TypeError, match=rf"^dimtorch\.audio\.{name}\(\): .*unexpected keyword argument 'dim'"):
        getattr(dt.audio, name)(dim=1)
