"""Slapo's remaining public names under their Slapo paths (utils, random, pipeline ties,
framework_dialect, model_schedule helpers) and the three semantics issue 17 aligns with Slapo:
TorchScript fusion leaves a ScriptModule (see test_schedule_primitives), tracing leaves an
`fx.GraphModule`, and `find` matches forking/joining patterns."""

import operator
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import shoal.schedule as slapo
from shoal.schedule import framework_dialect
from shoal.schedule import random as srandom
from shoal.schedule.model_schedule import base as msbase
from shoal.schedule.model_schedule.gpt2 import gen_embedding_hooks
from shoal.schedule.pipeline import analyze_tie_weights, generate_pipeline_partition
from shoal.schedule.utils import common, mapping, report

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from sched_models import MLP, Net  # noqa: E402


class Diamond(nn.Module):
    """x feeds two branches whose results meet; a decoy relu on another tensor comes first."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y):
        decoy = torch.relu(y)
        h = self.fc(x)
        b = torch.sigmoid(h)  # branch order differs from the pattern's
        a = torch.relu(h)
        return a * b + decoy


class TiedLM(nn.Module):
    def __init__(self, vocab: int = 16, hidden: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(2))
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


def test_find_matches_a_diamond_in_any_branch_order():
    sch = slapo.create_schedule(Diamond())
    found = sch.find(lambda x: torch.relu(x) * torch.sigmoid(x))
    assert len(found) == 1
    nodes = {n.target for _, n in found[0]}
    assert nodes == {torch.relu, torch.sigmoid, operator.mul}
    relu = next(n for _, n in found[0] if n.target is torch.relu)
    assert relu.args[0].target == "fc"  # the branch on fc's output, not the decoy on y
    # one input feeding both branches is required: two unrelated inputs do not form a diamond
    assert sch.find(lambda x: torch.relu(x) + torch.sigmoid(x)) == []


def test_fork_join_subgraph_can_be_replaced():
    model = Diamond()
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    expected = model(x, y)
    sch = slapo.create_schedule(model)
    (match,) = sch.find(lambda x: torch.relu(x) * torch.sigmoid(x))

    class Gate(nn.Module):
        def forward(self, h):
            return torch.relu(h) * torch.sigmoid(h)

    sch.replace(Gate(), match)
    assert "Gate_0" in sch.child
    torch.testing.assert_close(sch.mod(x, y), expected)


def test_trace_and_trace_until_leave_graph_modules():
    sch = slapo.create_schedule(Net())
    assert sch.trace_until("layers") is True
    assert isinstance(sch.mod, fx.GraphModule)
    assert {n.target for n in sch.mod.graph.nodes if n.op == "call_module"} >= {"layers.0"}
    sub = slapo.create_schedule(Net())
    assert sub["layers.0"].trace() is True
    assert isinstance(sub["layers.0"].mod, fx.GraphModule)
    assert isinstance(sub.mod.layers[0], fx.GraphModule)  # the parent holds the same object


def test_utils_common_hooks():
    src, dst = nn.Linear(2, 2), nn.Linear(2, 2)
    seen = []
    src.register_forward_hook(lambda *_: seen.append("post"))
    src.register_forward_pre_hook(lambda *_: seen.append("pre"))
    assert [len(v) for k, v in common.get_hooks(src).items() if k in ("fwd_pre", "fwd_post")] == [
        1,
        1,
    ]
    common.transfer_hooks(src, dst)
    assert not common.has_hooks(src) and common.has_hooks(dst)
    dst(torch.zeros(2))
    assert seen == ["pre", "post"]
    first, mid, last, fused = nn.ReLU(), nn.ReLU(), nn.ReLU(), nn.ReLU()
    first.register_forward_pre_hook(lambda *_: None)
    last.register_forward_hook(lambda *_: None)
    common.transfer_hooks_for_fusion([first, mid, last], fused)
    assert common.has_hooks(fused, ("fwd_pre",)) and common.has_hooks(fused, ("fwd_post",))
    mid.register_forward_hook(lambda *_: None)
    with pytest.raises(RuntimeError, match="middle"):
        common.transfer_hooks_for_fusion([first, mid, last], fused)
    assert common.is_module_list(nn.ModuleList([nn.ReLU()])) and not common.is_module_list(MLP())
    assert common.is_lambda_function(lambda: 0) and not common.is_lambda_function(len)


def test_utils_report_and_mapping():
    line = report.report_memory("after build", report_gc=True)
    assert line.startswith("after build") and "host_peak_rss_mb=" in line
    assert "live_tensors=" in line
    assert mapping.MAPPING_FROM_FUNCTIONAL_TO_MODULE[F.relu] is nn.ReLU
    assert mapping.MAPPING_FROM_FUNCTIONAL_TO_MODULE[F.gelu] is nn.GELU


def test_random_internals_on_cpu():
    assert srandom._CUDA_RNG_STATE_TRACKER is slapo.get_cuda_rng_tracker()
    assert srandom._MODEL_PARALLEL_RNG_TRACKER_NAME == "model-parallel-rng"
    srandom.model_parallel_cuda_manual_seed(7, tp_rank=1)
    tracker = srandom.get_cuda_rng_tracker()
    assert set(tracker.states_) == {"model-parallel-rng"} and 7 + 2718 + 1 in tracker.seeds_
    before = torch.get_rng_state()
    with tracker.fork():
        a = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)  # the default stream is untouched
    torch.manual_seed(7 + 2718 + 1)
    assert torch.equal(a, torch.rand(3))  # the forked stream is the TP-rank's seed
    with pytest.raises(ValueError, match="seed"):
        tracker.add("other", 7 + 2718 + 1)
    fresh = srandom.CudaRNGStatesTracker()
    fresh.add("s", 3)
    with fresh.fork("s"):
        b = torch.rand(2)
    torch.manual_seed(3)
    assert torch.equal(b, torch.rand(2))
    state = torch.get_rng_state()
    torch.rand(5)
    srandom._set_cuda_rng_state(state)  # CPU generator when CUDA is not in use
    assert torch.equal(torch.get_rng_state(), state)
    slapo.set_random_seed(0)


def test_analyze_tie_weights_in_model_and_partition():
    model = TiedLM()
    (group,) = analyze_tie_weights(model)
    assert group == [(0, "embed.weight"), (0, "head.weight")]
    sch = slapo.create_schedule(model)
    sch.trace_until("layers")
    sch["layers.0"].cut_pipeline_stage()
    split = generate_pipeline_partition(sch)
    (group,) = analyze_tie_weights(split, is_pipeline_partition=True)
    assert {stage for stage, _ in group} == {0, 1}
    assert framework_dialect.pipeline.analyze_tie_ranks(split) == [[0, 1]]


def test_framework_dialect_registry():
    get = framework_dialect.get_dialect_cls
    assert get("pipeline_engine", "pipeline") is framework_dialect.pipeline.init_pipeline_engine
    stage = get("pipeline_stage", "pipeline")(nn.Identity(), 1)
    assert stage.name == "submod_1" and torch.equal(stage(torch.ones(1)), torch.ones(1))
    with pytest.raises(slapo.ScheduleError, match="deepspeed"):
        get("pipeline_stage", "deepspeed")
    assert get("pipeline_stage", "deepspeed", allow_none=True) is None

    @framework_dialect.register_framework_dialect("mine-test", "runtime_engine")
    def engine(model):
        return model

    assert get("runtime_engine", "mine-test") is engine
    assert "mine-test" in framework_dialect.get_all_dialects()["runtime_engine"]
    with pytest.raises(slapo.ScheduleError, match="targets are None or 'pipeline'"):
        slapo.build(slapo.create_schedule(MLP()), target="deepspeed")


def test_model_schedule_helpers():
    from shoal.schedule.sharding import vocab_parallel_embedding_hooks

    assert gen_embedding_hooks is vocab_parallel_embedding_hooks
    assert msbase.generate_pipeline_cuts(8, 4) == [1, 3, 5]
    sch = slapo.create_schedule(Net(depth=4))
    assert msbase.checkpoint(sch, [f"layers.{i}" for i in range(4)], 0.5, "uniform") == 2
    assert isinstance(sch.mod.layers[0], slapo.CheckPointWrapper)
    assert isinstance(sch.mod.layers[2], slapo.CheckPointWrapper)
    assert not isinstance(sch.mod.layers[1], slapo.CheckPointWrapper)
    # q|k|v packed on an axis: regrouped so that an equal split gives each rank its heads
    packed = torch.arange(12).reshape(1, 12)  # q = 0..3, k = 4..7, v = 8..11
    grouped = msbase._pack_by_rank(packed, 1, 3, 2)
    assert grouped.tolist() == [[0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]]
    mlp = MLP()
    x = torch.randn(2, 8)
    expected = mlp(x)
    msch = slapo.create_schedule(mlp)
    msbase.fuse_bias_gelu(msch, "fc1")
    assert "BiasGeLU_0" in msch.child
    torch.testing.assert_close(msch.mod(x), expected)
