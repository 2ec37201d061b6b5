"""Pipeline partitioning and stages on `torch.distributed.pipelining`.

`cut_pipeline_stage` marks call nodes of the traced root; `generate_pipeline_partition` splits
the root GraphModule after each mark with `torch.fx.passes.split_module` (stages ``submod_0`` ..
``submod_{n-1}``). `build_pipeline` keeps this rank's stage and drives it with `ScheduleGPipe`
or `Schedule1F1B`; the returned `PipelineModel.step()` runs one batch of micro-batches.

Tied weights (a token embedding reused by the LM head) end up in two stages on two ranks, each
with its own copy after the split. `analyze_tie_weights` finds them; the stages that share one
sum its gradient over their ranks after every `step()` (Slapo/DeepSpeed's tied-module
all-reduce), so the copies take identical optimizer steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import fx, nn
from torch.fx.passes.split_module import split_module

from .errors import schedule_error

if TYPE_CHECKING:
    from .schedule import Schedule


def generate_pipeline_partition(sch: Schedule) -> fx.GraphModule:
    """Split the traced root at its `cut_pipeline_stage` marks into ``submod_<i>`` stages."""
    root = sch.get_top_schedule()
    gm = root.mod
    if not isinstance(gm, fx.GraphModule):
        raise schedule_error("build(target='pipeline')", root.path, "root is not traced")
    for name, sub in gm.named_modules():
        if name and isinstance(sub, fx.GraphModule):
            if any(n.meta.get("partition") for n in sub.graph.nodes):
                raise schedule_error(
                    "cut_pipeline_stage", name, "cuts must be in the root graph; use trace_until"
                )
    partition: dict[fx.Node, int] = {}
    stage = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        partition[node] = stage
        if node.meta.get("partition"):
            stage += 1
    if stage == 0:
        raise schedule_error("build(target='pipeline')", root.path, "no cut_pipeline_stage marks")
    return split_module(gm, gm, lambda n: partition[n], keep_original_order=True)


def _stage_of(path: str, is_pipeline_partition: bool) -> int:
    if not is_pipeline_partition:
        return 0
    head = path.split(".", 1)[0]
    if not head.startswith("submod_"):
        raise ValueError(f"{path!r} is not inside a pipeline stage submod_<i>")
    return int(head[len("submod_") :])


def analyze_tie_weights(
    top_mod: nn.Module, is_pipeline_partition: bool = False
) -> list[list[tuple[int, str]]]:
    """Groups of parameters that are one tensor reached by several names.

    Each group lists ``(stage, dotted_name)`` in module order; `stage` is ``i`` for names under
    ``submod_<i>`` of a pipeline partition, 0 otherwise. Only tensors with 2+ names appear."""
    by_tensor: dict[int, list[tuple[int, str]]] = {}
    for mod_name, mod in top_mod.named_modules(remove_duplicate=False):
        for pname, param in mod.named_parameters(recurse=False):
            full = f"{mod_name}.{pname}" if mod_name else pname
            entry = (_stage_of(full, is_pipeline_partition), full)
            names = by_tensor.setdefault(id(param), [])
            if entry not in names:
                names.append(entry)
    return [names for names in by_tensor.values() if len(names) > 1]


def _cross_stage_ties(split: fx.GraphModule) -> list[tuple[list[int], str]]:
    """Per tie spanning stages: the stages that hold it and its name inside each stage."""
    ties = []
    for group in analyze_tie_weights(split, is_pipeline_partition=True):
        local: dict[int, str] = {}
        for stage, name in group:
            local.setdefault(stage, name.split(".", 1)[1])
        if len(local) > 1:
            ties.append((sorted(local), local))
    return ties


class PipelineModel(nn.Module):
    """This rank's pipeline stage plus the schedule that drives all stages together."""

    def __init__(
        self,
        stage_mod: nn.Module,
        runner: Any,
        stage_index: int,
        num_stages: int,
        tied: list[tuple[nn.Parameter, Any]] | None = None,
    ):
        super().__init__()
        self.stage_mod = stage_mod
        self.runner = runner
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.tied = tied or []  # (this stage's copy, process group of the stages sharing it)

    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == self.num_stages - 1

    def step(self, *args: Any, target: Any = None, losses: list | None = None) -> Any:
        """First stage passes the inputs, last stage the target (and a list for losses)."""
        if self.is_first:
            out = self.runner.step(*args, target=target, losses=losses)
        else:
            out = self.runner.step(target=target, losses=losses)
        self.sync_tied_grads()
        return out

    def sync_tied_grads(self) -> None:
        """Sum the gradient of each tied weight over the stages holding a copy of it."""
        for param, group in self.tied:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad, group=group)

    def forward(self, *args: Any) -> Any:
        return self.stage_mod(*args)


def build_pipeline(
    sch: Schedule,
    num_microbatches: int = 1,
    schedule: str = "gpipe",
    loss_fn: Callable | None = None,
    group: Any = None,
    device: torch.device | str | None = None,
) -> PipelineModel:
    """Partition the model and build this rank's stage (stage i on rank i of `group`)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    kinds = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    kind = kinds.get(schedule.lower()) if isinstance(schedule, str) else None
    if kind is None:  # before any partitioning or stage building
        raise schedule_error(
            "build(target='pipeline')", "", f"schedule {schedule!r} is not one of {list(kinds)}"
        )
    split = generate_pipeline_partition(sch)
    stages = [getattr(split, f"submod_{i}") for i in range(len(list(split.children())))]
    num_stages, world = len(stages), dist.get_world_size(group)
    if num_stages != world:
        raise schedule_error(
            "build(target='pipeline')", "", f"{num_stages} stages but {world} pipeline ranks"
        )
    rank = dist.get_rank(group)
    stage_mod = stages[rank]
    tied = _tied_params(split, stage_mod, rank, group)
    if device is None:
        param = next(iter(stage_mod.parameters()), None)
        device = param.device if param is not None else torch.device("cpu")
    stage = PipelineStage(stage_mod, rank, num_stages, torch.device(device), group=group)
    runner = kind(stage, n_microbatches=num_microbatches, loss_fn=loss_fn)
    return PipelineModel(stage_mod, runner, rank, num_stages, tied)


def _tied_params(split: fx.GraphModule, stage_mod: nn.Module, rank: int, group: Any) -> list:
    """This stage's tied weights shared with other stages, each with the group of its holders.

    Every rank creates the same sub-groups in the same order (`new_group` is collective)."""
    members = dist.get_process_group_ranks(group) if group is not None else None
    tied = []
    for stages, local in _cross_stage_ties(split):
        if len(stages) == dist.get_world_size(group):
            sub = group
        else:
            sub = dist.new_group([members[s] if members else s for s in stages])
        if rank in stages:
            tied.append((stage_mod.get_parameter(local[rank]), sub))
    return tied
