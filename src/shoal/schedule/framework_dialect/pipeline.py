"""The ``"pipeline"`` dialect: stages and engine on `torch.distributed.pipelining`.

`PipeStageWrapper` (target ``"pipeline_stage"``) wraps one ``submod_<i>`` of a partition for
`PipelineStage`, which passes tensors between ranks as flat tuples: it unpacks the inputs and
returns a single tensor or a tuple. `init_pipeline_engine` (target ``"pipeline_engine"``) builds
this rank's stage and schedule (`pipeline.build_pipeline`). `analyze_tie_ranks` says which ranks
hold a copy of each tied weight (stage i runs on rank i).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..pipeline import analyze_tie_weights, build_pipeline
from .registry import register_framework_dialect


@register_framework_dialect("pipeline", "pipeline_stage")
class PipeStageWrapper(nn.Module):
    """One pipeline stage with flat tensor inputs and outputs."""

    def __init__(self, mod: nn.Module, stage_id: int, name: str = "") -> None:
        super().__init__()
        self.mod = mod
        self.stage_id = stage_id
        self.name = name or f"submod_{stage_id}"

    def forward(self, *args: Any) -> Any:
        out = self.mod(*args)
        if isinstance(out, list | tuple) and len(out) == 1:
            return out[0]
        return tuple(out) if isinstance(out, list) else out


@register_framework_dialect("pipeline", "pipeline_engine")
def init_pipeline_engine(sch: Any, **kwargs: Any) -> Any:
    """This rank's `PipelineModel` (keywords: num_microbatches, schedule, loss_fn, group,
    device), as `build(sch, target="pipeline")` returns it."""
    return build_pipeline(sch, **kwargs)


def analyze_tie_ranks(top_mod: nn.Module) -> list[list[int]]:
    """For each weight tied across stages of a partition, the ranks holding a copy."""
    groups = analyze_tie_weights(top_mod, is_pipeline_partition=True)
    ranks = [sorted({stage for stage, _ in group}) for group in groups]
    return [r for r in ranks if len(r) > 1]
