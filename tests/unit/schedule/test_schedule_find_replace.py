"""find/replace semantics: functional <-> module matching, vertical and horizontal replacement,
hook transfer and arity errors."""

import copy
import operator
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shoal.schedule as slapo
from shoal.schedule.pattern import call_module

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sched_models import MLP, QKV, FunctionalMLP, Net  # noqa: E402

X = torch.randn(3, 8)


class GeluPattern(slapo.Pattern):
    def __init__(self):
        super().__init__()
        self.fc = slapo.ModulePattern(r"fc1")
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.fc(x))


class Fused(nn.Module):
    """Stands in for fc1 + activation: reuses the original fc1 weights."""

    def __init__(self, fc, act):
        super().__init__()
        self.fc, self.act = fc, act

    def forward(self, x):
        return self.act(self.fc(x))


class FusedQKV(nn.Module):
    def __init__(self, src):
        super().__init__()
        self.q, self.k, self.v = src.q, src.k, src.v

    def forward(self, x):
        return self.q(x), self.k(x), self.v(x)


def test_find_regex_returns_module_nodes():
    sch = slapo.create_schedule(Net())
    found = sch.find(r"fc\d")
    assert [(p, n.target) for p, n in found] == [
        ("layers.0", "fc1"),
        ("layers.0", "fc2"),
        ("layers.1", "fc1"),
        ("layers.1", "fc2"),
    ]


def test_find_node_with_predicate():
    sch = slapo.create_schedule(FunctionalMLP())
    found = sch.find_node(lambda n: n.op == "call_function" and n.target is F.relu)
    assert len(found) == 1 and found[0][0] == ""


def test_functional_pattern_matches_module_call():
    sch = slapo.create_schedule(MLP())  # uses nn.GELU
    found = sch.find(lambda x: F.gelu(call_module("fc1", x)))
    assert len(found) == 1
    assert [n.target for _, n in found[0]] == ["fc1", "act"]


def test_module_pattern_matches_functional_call():
    sch = slapo.create_schedule(FunctionalMLP())  # uses F.relu

    class ReluPattern(slapo.Pattern):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(x)

    found = sch.find(ReluPattern())
    assert len(found) == 1 and found[0][0][1].target is F.relu
    assert sch.find(GeluPattern()) == []  # no gelu in this model


def test_operator_and_torch_function_are_equivalent():
    sch = slapo.create_schedule(QKV())
    found = sch.find(lambda a, b, c: torch.add(torch.mul(a, b), c))
    assert len(found) == 1
    assert [n.target for _, n in found[0]] == [operator.mul, operator.add]


def test_matches_do_not_overlap_and_cover_every_graph():
    sch = slapo.create_schedule(Net())
    found = sch.find(GeluPattern())
    assert [m[0][0] for m in found] == ["layers.0", "layers.1"]


def test_vertical_replace_of_subgraph():
    model = MLP()
    expected = model(X)
    sch = slapo.create_schedule(model)
    (match,) = sch.find(GeluPattern())
    sch.replace(Fused(model.fc1, model.act), match)
    assert "Fused_0" in sch.child and "fc1" not in sch.child
    torch.testing.assert_close(sch.mod(X), expected)
    targets = [n.target for n in sch.mod.graph.nodes if n.op == "call_module"]
    assert targets == ["Fused_0", "fc2"]


def test_vertical_replace_uses_name_and_numbers():
    model = Net()
    sch = slapo.create_schedule(model)
    for sub in ("layers.0", "layers.1"):
        (match,) = sch[sub].find(GeluPattern())
        mlp = sch[sub].mod
        sch[sub].replace(Fused(mlp.fc1, mlp.act), match, name="FcAct")
        assert "FcAct_0" in sch[sub].child
    sub = sch["layers.0"]
    extra = sub.find(r"fc2")
    sub.replace(nn.Identity(), extra, name="FcAct")
    assert "FcAct_1" in sub.child  # next free number


def test_single_node_function_replace_keeps_args():
    model = FunctionalMLP()
    sch = slapo.create_schedule(model)
    (node,) = sch.find_node(lambda n: n.op == "call_function" and n.target is F.relu)

    def sigmoid(x, inplace=False):  # the traced F.relu call passes inplace=False
        return torch.sigmoid(x)

    sch.replace(sigmoid, [node])
    expected = model.fc2(torch.sigmoid(model.fc1(X)))
    torch.testing.assert_close(sch.mod(X), expected)


def test_horizontal_replace():
    model = QKV()
    expected = model(X)
    sch = slapo.create_schedule(model)
    found = sch.find(r"q|k|v")
    assert len(found) == 3
    sch.replace(FusedQKV(copy.deepcopy(model)), found)
    assert "FusedQKV_0" in sch.child
    assert not {"q", "k", "v"} & set(sch.child)
    torch.testing.assert_close(sch.mod(X), expected)


def test_whole_module_replace_moves_all_hooks():
    model = MLP()
    calls = []
    model.fc1.register_forward_pre_hook(lambda m, i: calls.append("pre"))
    model.fc1.register_forward_hook(lambda m, i, o: calls.append("post"))
    model.fc1.register_full_backward_hook(lambda m, gi, go: calls.append("bwd"))
    model.fc1.register_forward_pre_hook(lambda m, a, kw: calls.append("pre_kw"), with_kwargs=True)
    model.fc1.register_forward_hook(lambda m, i, o: calls.append("always"), always_call=True)
    sch = slapo.create_schedule(model)
    old, new = model.fc1, nn.Linear(8, 16)
    sch["fc1"].replace(new)
    assert sch.mod.fc1 is new and sch["fc1"].mod is new
    assert not slapo.hooks.has_hooks(old)  # moved, not copied
    x = X.clone().requires_grad_()
    sch.mod(x).sum().backward()
    assert calls == ["pre", "pre_kw", "post", "always", "bwd"]
    assert new._is_full_backward_hook and slapo.hooks.get_hooks(new)["bwd_post"]


def test_subgraph_replace_moves_first_pre_and_last_post_hooks():
    model = MLP()
    calls = []
    model.fc1.register_forward_pre_hook(lambda m, i: calls.append("pre"))
    model.act.register_forward_hook(lambda m, i, o: calls.append("post"))
    old_fc1, old_act = model.fc1, model.act
    sch = slapo.create_schedule(model)
    (match,) = sch.find(GeluPattern())
    fused = Fused(nn.Linear(8, 16), nn.GELU())
    new = sch.replace(fused, match)
    # fc1 -> act became one call of the new module, which feeds fc2; fc1 and act are gone
    assert (new.op, new.target) == ("call_module", "Fused_0") and sch.mod.Fused_0 is fused
    assert [user.target for user in new.users] == ["fc2"]
    assert set(sch.child) == {"Fused_0", "fc2"}
    # the hooks moved: fc1's pre hook and act's post hook are now the fused module's
    has_hooks = slapo.hooks.has_hooks
    assert not has_hooks(old_fc1) and not has_hooks(old_act)
    assert has_hooks(fused, ("fwd_pre",)) and has_hooks(fused, ("fwd_post",))
    expected = model.fc2(fused.act(fused.fc(X)))  # the parts, so that no hook fires
    torch.testing.assert_close(sch.mod(X), expected)
    assert calls == ["pre", "post"]


def test_hook_on_middle_node_is_an_error():
    model = MLP()
    model.act.register_forward_pre_hook(lambda m, i: None)
    sch = slapo.create_schedule(model)
    match = sch.find(lambda x: call_module("fc2", F.gelu(call_module("fc1", x))))[0]
    with pytest.raises(slapo.ScheduleError, match="middle node"):
        sch.replace(nn.Identity(), match)


def test_horizontal_replace_rejects_hooks():
    model = QKV()
    model.k.register_forward_hook(lambda m, i, o: o)
    sch = slapo.create_schedule(model)
    with pytest.raises(slapo.ScheduleError, match="horizontal"):
        sch.replace(FusedQKV(model), sch.find(r"q|k|v"))


def test_arity_mismatch_is_a_value_error():
    class TwoInputs(nn.Module):
        def forward(self, a, b):
            return a + b

    sch = slapo.create_schedule(MLP())
    (match,) = sch.find(GeluPattern())
    with pytest.raises(ValueError) as info:
        sch.replace(TwoInputs(), match)
    msg = str(info.value)
    assert "replace" in msg and "2 required" in msg and "provides 1" in msg


def test_replace_without_matches_is_an_error():
    sch = slapo.create_schedule(MLP())
    with pytest.raises(slapo.ScheduleError, match="no target ops"):
        sch.replace(nn.Identity(), sch.find(r"nothing"))
    with pytest.raises(slapo.ScheduleError, match="nn.Module"):
        sch.replace(torch.relu)


def test_replace_all_by_type():
    model = Net()
    sch = slapo.create_schedule(model)
    count = sch.replace_all(nn.GELU, lambda path, mod: nn.ReLU())
    assert count == 2
    assert isinstance(sch["layers.1.act"].mod, nn.ReLU)
    assert isinstance(model.layers[0].act, nn.ReLU)


def test_horizontal_replace_with_slapo_fused_qkv_op():
    from shoal.schedule.op import FusedQKV as OpFusedQKV

    model = QKV()
    expected = model(X)
    sch = slapo.create_schedule(model)
    fused = OpFusedQKV.from_linears(model.q, model.k, model.v, num_heads=2)
    sch.replace(fused, sch.find(r"q|k|v"))
    torch.testing.assert_close(sch.mod(X), expected)
    sch["FusedQKV_0.fused_linear"].shard(["weight", "bias"], axis=0)  # world size 1: whole
