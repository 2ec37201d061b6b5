"""What a run of `bench/slowlink_train.py`'s sides left behind, read back: its step times and
model states, its final digest, the validation loss of each state, and the table of a rate."""

from __future__ import annotations

import json
import math
import pathlib
import sys

import torch

from shoal.errors import UserError
from shoal.job import build_job, load_job_file, parse_options
from shoal.metrics.files import RESULT_FILE, read_result
from slowlink.sides import Model

ROOT = pathlib.Path(__file__).resolve().parents[2]
IN_RUN = ("ddp", "powersgd", "shoal-auto")  # curves from the timed run itself (no replay)


def curve(side: str, out: pathlib.Path) -> tuple[list[float], dict[int, dict]]:
    """Per-step seconds and the set-aside model states by step."""
    if side in ("ddp", "powersgd"):
        times = json.loads((out / "ddp.json").read_text())["step_times_s"]
        snaps = {int(p.stem[5:]): p for p in out.glob("snap-*.pt")}
        return times, {s: torch.load(p, weights_only=True) for s, p in snaps.items()}
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r["step_time_s"] for r in lines if r.get("kind") == "step"}
    times = [by_step[s] for s in sorted(by_step)]
    states = {}
    for p in (out / "kept").glob("ckpt-*.pt"):
        states[int(p.stem[5:])] = torch.load(p, weights_only=True)["model"]
    return times, states


def final_digest(out: pathlib.Path) -> str:
    """The state_sha256 that rank 0 wrote at the end of a shoal run."""
    try:
        result = read_result(out / RESULT_FILE)
    except UserError as exc:  # a row's error, not the bench's end
        raise RuntimeError(str(exc)) from exc
    if result is None:
        raise RuntimeError(f"no {out / RESULT_FILE}")
    return result.state_sha256


def validation(model_name: str, model: Model):
    """(job, batches) to evaluate a model state on."""
    path = ROOT / model.job
    job = build_job(load_job_file(path), parse_options(list(model.options)), None)
    module = sys.modules[f"shoal_job_{path.stem}"]
    if model_name == "transformer":
        data = module.ReverseDataset(1024, seed=10_000)  # sequences the job never trains on
        batches = [(x, x.flip(1)) for x in data.inputs.split(256)]
    else:
        x, y = job.dataset.tensors
        batches = [(x, y)]
    return job, batches


@torch.no_grad()
def val_loss(job, batches, state: dict) -> float:
    net = job.model()
    net.load_state_dict(state, strict=False)  # non-persistent buffers are rebuilt by the model
    net.eval()
    total = sum(float(job.loss_fn(net, b)) * len(b[0]) for b in batches)
    return total / sum(len(b[0]) for b in batches)


def summarize(side: str, times: list[float], losses: dict[int, float], target: float) -> dict:
    warm = times[3:] or times  # the first steps pay connection set-up and exact mode's probe
    reached = next((s for s in sorted(losses) if losses[s] <= target), None)
    return {
        "side": side,
        "steps": len(times),
        "steps_per_s": len(warm) / sum(warm) if sum(warm) > 0 else math.nan,
        "train_s": sum(times),
        "final_val_loss": losses[max(losses)] if losses else math.nan,
        "target": target,
        "time_to_target_s": sum(times[:reached]) if reached else None,
        "target_step": reached,
    }


def table(rows: list[dict]) -> str:
    ddp = next((r for r in rows if r["side"] == "ddp" and "status" not in r), None)
    head = "| side | steps/s | x DDP | time to target (s) | x DDP | final val loss | vs DDP |"
    out = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "status" in r:
            out.append(f"| {r['side']} | {r['status']} | | | | | |")
            continue
        t = r["time_to_target_s"]
        speed = r["steps_per_s"] / ddp["steps_per_s"] if ddp else math.nan
        tt = ddp and ddp["time_to_target_s"] and t and ddp["time_to_target_s"] / t
        gap = r["final_val_loss"] / ddp["final_val_loss"] - 1 if ddp else math.nan
        out.append(
            f"| {r['side']} | {r['steps_per_s']:.2f} | {speed:.2f} | "
            f"{'not reached' if t is None else f'{t:.1f}'} | {tt or float('nan'):.2f} | "
            f"{r['final_val_loss']:.4f} | {gap:+.1%} |"
        )
    return "\n".join(out + footnote(rows))


def footnote(rows: list[dict]) -> list[str]:
    """Where each side's validation curve came from (the timed run or a replay)."""
    replayed = [r["side"] for r in rows if r.get("curve") == "replay" and "status" not in r]
    in_run = [r["side"] for r in rows if r.get("curve") == "in-run" and r["side"] in IN_RUN]
    notes = []
    if replayed:
        notes.append(
            f"Curves of {', '.join(replayed)}: a replay with checkpoints every --eval-every "
            "steps on a fast link, its final state_sha256 equal to the timed run's (which "
            "wrote none)."
        )
    if "shoal-auto" in in_run:
        notes.append(
            "shoal-auto's curve: its timed run's own checkpoints (on its clock); its keep "
            "follows the measured bandwidth, so a replay would not retrace it."
        )
    return ["", *notes] if notes else []
