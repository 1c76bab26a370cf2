"""Tests of python/dimtorch/nn/container.py: ModuleList list- and dict-like as RETURNN frontend's,
ModuleDict's int index, Functional; state-dict keys follow the names; errors name the call."""
import pytest
import torch

import dimtorch as dt


def _lin(i=3, o=3):
    return dt.nn.Linear(dt.Dim(i, name="i"), dt.Dim(o, name="o"))


def test_module_list_forms_and_access():
    a, b, c = _lin(), _lin(), _lin()
    for ml in (dt.nn.ModuleList(a, b, c), dt.nn.ModuleList([a, b, c]), dt.nn.ModuleList(iter([a, b, c]))):
        assert len(ml) == 3 and list(ml) == [a, b, c] and list(ml.keys()) == ["0", "1", "2"]
        assert ml[0] is a and ml[-1] is c and ml["1"] is b
    named = dt.nn.ModuleList({"enc": a, "7": b, "dec": c})
    assert list(named.keys()) == ["enc", "1", "dec"]  # number names are renumbered by position
    assert named["enc"] is a and named[1] is b and named["dec"] is c and named[-1] is c
    assert [k for k, _ in named.items()] == ["enc", "1", "dec"] and list(named.values()) == [a, b, c]
    assert set(named.state_dict()) == {"enc.weight", "enc.bias", "1.weight", "1.bias", "dec.weight", "dec.bias"}
    part = named[1:]
    assert isinstance(part, dt.nn.ModuleList) and list(part.keys()) == ["0", "dec"] and part["dec"] is c
    copy = dt.nn.ModuleList(named)
    assert list(copy.keys()) == ["enc", "1", "dec"]
    assert isinstance(named, torch.nn.ModuleList) and isinstance(named, dt.nn.Module)


def test_module_list_assignment_deletion_and_growth():
    a, b, c, d = _lin(), _lin(), _lin(), _lin()
    ml = dt.nn.ModuleList({"enc": a, "x": b})
    ml[0] = c
    assert ml["enc"] is c
    ml["new"] = d
    assert list(ml.keys()) == ["enc", "x", "new"] and ml[2] is d
    del ml["x"]
    assert list(ml.keys()) == ["enc", "new"]
    ml.append(a)
    assert list(ml.keys()) == ["enc", "new", "2"] and ml[2] is a
    del ml[0]
    assert list(ml.keys()) == ["new", "1"]
    ml[0:1] = [b, c]
    assert list(ml.values()) == [b, c, a] and list(ml.keys()) == ["0", "1", "2"]
    ml.insert(1, d)
    assert list(ml.values()) == [b, d, c, a]
    ml.extend([a])
    assert len(ml) == 5
    del ml[1:3]
    assert list(ml.values()) == [b, a, a]
    assert ml.pop(0) is b and len(ml) == 2


def test_functions_become_functional_modules():
    ml = dt.nn.ModuleList([lambda x: x * 2, _lin()])
    assert isinstance(ml[0], dt.nn.Functional)
    x = dt.Tensor(torch.ones(3), (dt.Dim(3, name="f"),))
    assert torch.equal(ml[0](x).raw, torch.full((3,), 2.0))
    f = dt.nn.Functional(torch.neg, attribs={"out_dim": x.dims[0]})
    assert f.out_dim is x.dims[0] and "neg" in repr(f)


def test_module_dict_int_index():
    a, b = _lin(), _lin()
    md = dt.nn.ModuleDict({"a": a, "b": b})
    assert md["a"] is a and md[1] is b and md[-2] is a and list(md) == ["a", "b"]
    with pytest.raises(IndexError, match=r"dimtorch\.nn\.ModuleDict\[\]: index 2 is out of range for 2 modules"):
        md[2]


def test_container_errors():
    ml = dt.nn.ModuleList(_lin(), _lin())
    with pytest.raises(KeyError, match=r"dimtorch\.nn\.ModuleList\[\]: no module named 'enc' \(names: 0, 1\)"):
        ml["enc"]
    with pytest.raises(IndexError, match=r"dimtorch\.nn\.ModuleList\[\]: index 5 is out of range for 2 modules"):
        ml[5]
    with pytest.raises(TypeError, match=r"dimtorch\.nn\.ModuleList\[\]: index must be an int, a name or a slice"):
        ml[1.5]
    with pytest.raises(TypeError, match=r"dimtorch\.nn\.ModuleList\(\): expected a module or a callable, got int"):
        dt.nn.ModuleList([1, 2])
    with pytest.raises(ValueError, match=r"dimtorch\.nn\.ModuleList\[\]: slice assignment needs step 1"):
        ml[::2] = [_lin()]
    with pytest.raises(TypeError, match=r"dimtorch\.nn\.Functional\(\): func must be callable"):
        dt.nn.Functional(3)


def test_batch_norm_affine_attribute():
    f = dt.Dim(4, name="f")
    assert dt.nn.BatchNorm(f).affine is True
    bn = dt.nn.BatchNorm(f, affine=False)
    assert bn.affine is False and bn.scale is None and bn.bias is None
