"""Turn a `SimResult` into numbers and files: per-job CSV, summary JSON, plots, comparisons.

Summary: average and p99 JCT over finished jobs, makespan (last completion, or the horizon
where the simulation stopped with jobs unfinished), GPU utilisation
(allocated GPU-seconds over the GPU-seconds the alive nodes offered until the makespan), total
cost (per-second billing of the GPUs each job held; a revoked spot GPU is billed until its
revocation) and GPU-hours.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from shoal.sim.simulator import SimResult

JOB_FIELDS = (
    "name",
    "app",
    "arrival_s",
    "start_s",
    "finish_s",
    "jct_s",
    "queue_s",
    "gpu_hours",
    "cost_usd",
    "restarts",
    "revocations",
)


def job_rows(result: SimResult) -> list[dict]:
    rows = []
    for job in sorted(result.jobs, key=lambda j: (j.spec.arrival_s, j.name)):
        finish = job.finish_s
        rows.append(
            {
                "name": job.name,
                "app": job.spec.app,
                "arrival_s": job.spec.arrival_s,
                "start_s": job.start_s,
                "finish_s": finish,
                "jct_s": None if finish is None else finish - job.spec.arrival_s,
                "queue_s": None if job.start_s is None else job.start_s - job.spec.arrival_s,
                "gpu_hours": job.gpu_s / 3600,
                "cost_usd": result.cost_usd_by_job.get(job.name, 0.0),
                "restarts": job.restarts,
                "revocations": job.revocations,
            }
        )
    return rows


def summarize(result: SimResult) -> dict:
    rows = job_rows(result)
    jcts = np.array([r["jct_s"] for r in rows if r["jct_s"] is not None])
    used_gpu_s = sum(j.gpu_s for j in result.jobs)
    return {
        "policy": result.policy,
        "jobs": len(rows),
        "finished": int(len(jcts)),
        "avg_jct_s": float(jcts.mean()) if len(jcts) else None,
        "p99_jct_s": float(np.percentile(jcts, 99)) if len(jcts) else None,
        "makespan_s": result.makespan_s,
        "gpu_utilization": used_gpu_s / result.capacity_gpu_s if result.capacity_gpu_s else 0.0,
        "gpu_hours": used_gpu_s / 3600,
        "total_cost_usd": sum(result.cost_usd_by_job.values()),
        "revoked_nodes": result.revoked_nodes,
        "events": result.events,
    }


PLOT_FILES = ("jct_cdf.png", "gpus_in_use.png")  # the files `_plot` writes


def write_outputs(result: SimResult, out_dir: Path, plots: bool = True) -> dict:
    """Write `jobs.csv`, `summary.json` and (optionally) the `PLOT_FILES`; without plots, the
    plots an earlier run left in `out_dir` are removed, so none sits beside numbers it does not
    show."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = job_rows(result)
    with (out_dir / "jobs.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=JOB_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    summary = summarize(result)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if plots:
        _plot(result, rows, out_dir)
    else:
        for name in PLOT_FILES:
            (out_dir / name).unlink(missing_ok=True)
    return summary


def _plot(result: SimResult, rows: list[dict], out_dir: Path) -> None:
    import matplotlib  # lazily: plotting is optional work

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    jcts = np.sort([r["jct_s"] for r in rows if r["jct_s"] is not None])
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(jcts / 3600, np.arange(1, len(jcts) + 1) / max(len(jcts), 1), drawstyle="steps-post")
    ax.set_xscale("log")
    ax.set_xlabel("JCT (hours)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF, {result.policy}")
    fig.tight_layout()
    fig.savefig(out_dir / "jct_cdf.png", dpi=120)
    plt.close(fig)

    times = [t for t, _ in result.timeline]
    used = [n for _, n in result.timeline]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.step(np.array(times) / 3600, used, where="post")
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs in use")
    ax.set_title(f"GPUs in use, {result.policy}")
    fig.tight_layout()
    fig.savefig(out_dir / "gpus_in_use.png", dpi=120)
    plt.close(fig)


def format_comparison(summaries: list[dict]) -> str:
    """Policies side by side, one column each."""
    metrics = (
        ("avg JCT (s)", "avg_jct_s", "{:.0f}"),
        ("p99 JCT (s)", "p99_jct_s", "{:.0f}"),
        ("makespan (s)", "makespan_s", "{:.0f}"),
        ("GPU utilisation", "gpu_utilization", "{:.2f}"),
        ("GPU-hours", "gpu_hours", "{:.1f}"),
        ("total cost ($)", "total_cost_usd", "{:.2f}"),
        ("finished jobs", "finished", "{}"),
    )
    width = max(16, *(len(s["policy"]) + 2 for s in summaries))
    lines = ["metric".ljust(18) + "".join(s["policy"].rjust(width) for s in summaries)]
    for label, key, fmt in metrics:
        cells = ["-" if s[key] is None else fmt.format(s[key]) for s in summaries]
        lines.append(label.ljust(18) + "".join(c.rjust(width) for c in cells))
    return "\n".join(lines)
