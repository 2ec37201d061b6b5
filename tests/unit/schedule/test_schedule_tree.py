"""The schedule tree: structure, paths, registry, tracing."""

import pathlib
import sys
import warnings

import pytest
import torch
from torch import fx, nn

import shoal.schedule as slapo
from shoal.schedule.primitives.base import PRIMITIVES, Primitive

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sched_models import MLP, Net, Untraceable  # noqa: E402


def test_children_mirror_modules_with_flat_module_lists():
    sch = slapo.create_schedule(Net())
    assert list(sch.child) == ["layers.0", "layers.1", "head"]
    assert list(sch["layers.0"].child) == ["fc1", "act", "fc2"]
    assert sch["layers.1.fc2"].path == "layers.1.fc2"
    assert sch["layers.1.fc2"].name == "fc2"
    assert sch["head.0"].mod is sch.mod.head[0]  # Sequential is a normal child
    assert sch["layers.0.fc1"].child == {}  # built-in modules are leaves
    assert sch[""] is sch
    assert "layers.1.act" in sch and "layers.2" not in sch
    assert sch["layers.0"].parent is sch and sch["layers.0.fc1"].get_top_schedule() is sch
    assert sch.world_size == 1 and sch.rank == 0


def test_unknown_path_is_one_clear_key_error():
    sch = slapo.create_schedule(Net())
    with pytest.raises(KeyError) as info:
        sch["layers.0.fc3"]
    assert isinstance(info.value, slapo.ScheduleError)
    msg = str(info.value)
    assert "layers.0.fc3" in msg and "sch[" in msg and "no such submodule" in msg


def test_unknown_path_is_reported_where_the_walk_stopped():
    sch = slapo.create_schedule(Net())
    with pytest.raises(KeyError) as info:
        sch["layers.0.fc3"]
    msg = str(info.value)
    assert "'fc3' under 'layers.0' (MLP)" in msg and "['act', 'fc1', 'fc2']" in msg, msg
    sch["layers.0"].checkpoint()
    with pytest.raises(KeyError) as info:
        sch["layers.0.fc1"]  # the block moved under the wrapper
    msg = str(info.value)
    assert "children are ['mod']" in msg and "the block is at 'layers.0.mod'" in msg, msg
    assert sch["layers.0.mod.fc1"].mod is sch.mod.layers[0].mod.fc1


def test_named_schedules_and_get_module():
    sch = slapo.create_schedule(Net())
    names = [n for n, _ in sch.named_schedules()]
    assert names[:3] == ["", "layers.0", "layers.0.fc1"]
    assert sch.get_module("layers.1.fc1") is sch["layers.1.fc1"].mod
    assert sch.get_module("") is sch.mod


def test_register_primitive_exposes_a_method():
    @slapo.register_primitive()
    class Tag(Primitive):
        @staticmethod
        def name():
            return "tag_for_test"

        @staticmethod
        def apply(sch, value):
            sch.mod.tagged = value

    try:
        sch = slapo.create_schedule(MLP())
        sch["fc1"].tag_for_test(3)
        assert sch.mod.fc1.tagged == 3
        assert "tag_for_test" in slapo.list_primitives()
    finally:
        del PRIMITIVES["tag_for_test"]
    expected = {"shard", "sync", "checkpoint", "replace", "replace_all", "fuse", "decompose"}
    assert expected | {"cut_pipeline_stage", "annotate", "fork_rng"} <= set(slapo.list_primitives())
    with pytest.raises(AttributeError):
        sch.not_a_primitive()


def test_trace_keeps_hierarchy_and_numerics():
    model = Net()
    model.config = {"hidden": 8}  # a config object: must still be readable after tracing
    x = torch.randn(3, 8)
    expected = model(x)
    sch = slapo.create_schedule(model)
    assert sch.trace()
    assert isinstance(sch.mod, fx.GraphModule)
    assert isinstance(sch["layers.0"].mod, fx.GraphModule)  # children traced separately
    assert sch.mod.num_layers == 2 and sch.mod.config == {"hidden": 8}  # attributes survive
    targets = [n.target for n in sch.mod.graph.nodes if n.op == "call_module"]
    assert targets == ["layers.0", "layers.1", "head"]
    assert list(sch.child) == ["layers.0", "layers.1", "head"]
    torch.testing.assert_close(sch.mod(x), expected)


def test_trace_flatten_inlines_children():
    sch = slapo.create_schedule(Net())
    sch.trace(flatten=True)
    targets = [n.target for n in sch.mod.graph.nodes if n.op == "call_module"]
    assert "layers.0.fc1" in targets and "layers.0" not in targets


def test_trace_failure_warns_and_leaves_module():
    model = Untraceable()
    sch = slapo.create_schedule(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sch.trace() is False
    assert sch.mod is model
    assert any("cannot trace" in str(w.message) for w in caught)


def test_trace_until_makes_list_items_leaves():
    sch = slapo.create_schedule(Net())
    sch.trace_until("layers")
    targets = [n.target for n in sch.mod.graph.nodes if n.op == "call_module"]
    assert targets[:2] == ["layers.0", "layers.1"]
    assert "layers.0" in sch and sch["layers.0"].parent is sch
    with pytest.raises(slapo.ScheduleError, match="trace_until"):
        sch["layers.0"].trace_until("fc1")


def test_trace_rejects_unknown_tracer():
    sch = slapo.create_schedule(MLP())
    with pytest.raises(slapo.ScheduleError, match="tracer"):
        sch.trace(tracer="nonsense")


def test_leaf_modules_option():
    sch = slapo.create_schedule(Net())
    sch.trace(flatten=True, leaf_modules=["MLP"])
    targets = [n.target for n in sch.mod.graph.nodes if n.op == "call_module"]
    assert targets[:2] == ["layers.0", "layers.1"]
    assert type(sch["layers.0"].mod).__name__ == "MLP"  # a leaf: not traced
    assert not isinstance(sch["layers.0"].mod, fx.GraphModule)
    assert isinstance(sch["layers.0.fc1"].mod, nn.Linear)
