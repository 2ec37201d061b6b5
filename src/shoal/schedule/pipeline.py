"""Pipeline partitioning and stages on `torch.distributed.pipelining`.

`cut_pipeline_stage` marks call nodes of the traced root; `generate_pipeline_partition` splits
the root GraphModule after each mark with `torch.fx.passes.split_module` (stages ``submod_0`` ..
``submod_{n-1}``). `build_pipeline` keeps this rank's stage and drives it with `ScheduleGPipe`
or `Schedule1F1B`; the returned `PipelineModel.step()` runs one batch of micro-batches.
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


class PipelineModel(nn.Module):
    """This rank's pipeline stage plus the schedule that drives all stages together."""

    def __init__(self, stage_mod: nn.Module, runner: Any, stage_index: int, num_stages: int):
        super().__init__()
        self.stage_mod = stage_mod
        self.runner = runner
        self.stage_index = stage_index
        self.num_stages = num_stages

    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == self.num_stages - 1

    def step(self, *args: Any, target: Any = None, losses: list | None = None) -> Any:
        """First stage passes the inputs, last stage the target (and a list for losses)."""
        if self.is_first:
            return self.runner.step(*args, target=target, losses=losses)
        return self.runner.step(target=target, losses=losses)

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

    split = generate_pipeline_partition(sch)
    stages = [getattr(split, f"submod_{i}") for i in range(len(list(split.children())))]
    num_stages, world = len(stages), dist.get_world_size(group)
    if num_stages != world:
        raise schedule_error(
            "build(target='pipeline')", "", f"{num_stages} stages but {world} pipeline ranks"
        )
    rank = dist.get_rank(group)
    stage_mod = stages[rank]
    if device is None:
        param = next(iter(stage_mod.parameters()), None)
        device = param.device if param is not None else torch.device("cpu")
    stage = PipelineStage(stage_mod, rank, num_stages, torch.device(device), group=group)
    kinds = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    if schedule.lower() not in kinds:
        raise schedule_error("build(target='pipeline')", "", f"schedule must be one of {kinds}")
    runner = kinds[schedule.lower()](stage, n_microbatches=num_microbatches, loss_fn=loss_fn)
    return PipelineModel(stage_mod, runner, rank, num_stages)
