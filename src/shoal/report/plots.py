"""The report's PNG plots, drawn with matplotlib's object API on the Agg renderer: the four every
run gets (loss, throughput, micro-batch share, membership timeline), and `render_plots`, which
writes them together with those a run's settings add (`plots_optional`).

Each worker keeps one colour across all plots, and membership events are drawn in the same style
everywhere (`plot_style`), so a dip in throughput lines up by eye with the failure that caused it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from shoal.metrics.training import StepLine
from shoal.report.load import Run
from shoal.report.plot_style import (
    EVENT_STYLE,
    changes_by_step,
    event_lines,
    figure,
    integer_steps,
    no_data,
    worker_colors,
)
from shoal.report.plots_optional import adaptive, compressed, plot_batch, plot_cost, plot_link
from shoal.report.timeline import Timeline, worker_order

# Workers drawn one by one (a band, a row, a legend entry each): a run of 4,096 workers took
# 75 s and 1.2 GB (a timeline 2,250 inches tall); 20,000 never finished. Past it the share plot
# bands the smallest together and the timeline draws the first ones.
MAX_WORKERS_DRAWN = 16  # a legend of 16 fits beside the share plot


def _samples_per_s(s: StepLine) -> float | None:
    if s.samples_per_s is not None:
        return s.samples_per_s
    if s.global_batch_size is not None and s.step_time_s:
        return s.global_batch_size / s.step_time_s
    return None


def _break_at(
    points: list[tuple[float, float]], cuts: list[float]
) -> tuple[list[float], list[float]]:
    """Split a line into segments at `cuts`: a NaN point between the two samples around a cut.

    Throughput is only defined while steps complete; joining the last step before a failure to
    the first one after it would draw a slope through time in which nothing ran.
    """
    xs: list[float] = []
    ys: list[float] = []
    for i, (x, y) in enumerate(points):
        if i and any(points[i - 1][0] <= c < x for c in cuts):
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(x)
        ys.append(y)
    return xs, ys


def plot_loss(run: Run, path: Path) -> None:
    """Loss against step, with dashed lines where membership changed."""
    fig = figure(3.6)
    ax = fig.add_subplot()
    points = [(s.step, s.loss) for s in run.steps if s.loss is not None]
    if not points:
        no_data(ax, "no loss logged")
    else:
        ax.plot([p[0] for p in points], [p[1] for p in points], color="#333", linewidth=1.5)
        event_lines(ax, changes_by_step(run))
        ax.set_xlabel("step")
        integer_steps(ax)
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
    ax.set_title("Loss")
    fig.savefig(path, format="png")


def plot_throughput(run: Run, timeline: Timeline, path: Path) -> None:
    """Samples/s against wall time (against step when the run logged no wall times)."""
    fig = figure(3.6)
    ax = fig.add_subplot()
    rows = [(s, _samples_per_s(s)) for s in run.steps]
    rows = [(s, v) for s, v in rows if v is not None]
    by_wall = bool(rows) and all(s.wall_time_s is not None for s, _ in rows)
    if not rows:
        no_data(ax, "no throughput logged")
    else:
        if by_wall:
            marks = [
                (p.event.event, p.time_s)
                for p in timeline.events
                if p.time_s is not None and p.event.event != "recover"
            ]
        else:
            marks = changes_by_step(run)
        points = sorted((s.wall_time_s if by_wall else s.step, v) for s, v in rows)
        # A change logged at wall time t happened after the step completed at or before t; one
        # logged at step n happened while step n ran, i.e. between steps n - 1 and n.
        cuts = [x if by_wall else x - 0.5 for _, x in marks]
        xs, ys = _break_at(points, cuts)
        ax.plot(xs, ys, color="#333", linewidth=1.5, marker=".", markersize=3)
        event_lines(ax, marks)
        ax.set_xlabel("wall time (s)" if by_wall else "step")
        if not by_wall:
            integer_steps(ax)
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize="small")
    ax.set_title("Throughput")
    fig.savefig(path, format="png")


def plot_share(run: Run, path: Path) -> None:
    """Each worker's fraction of the step's micro-batches, stacked, against step."""
    fig = figure(3.8)
    ax = fig.add_subplot()
    steps = [s for s in run.steps if sum(w.micro_batches for w in s.workers) > 0]
    if not steps:
        no_data(ax, "no micro-batch assignments logged")
    else:
        workers = worker_order(run)
        colors = worker_colors(workers)
        devices: dict[str, str] = {}
        shares: dict[str, list[float]] = {w: [] for w in workers}
        for s in steps:
            total = sum(w.micro_batches for w in s.workers)
            mine = {w: 0 for w in workers}
            for w in s.workers:
                mine[w.id] += w.micro_batches
                if w.device:
                    devices.setdefault(w.id, w.device)
            for w in workers:
                shares[w].append(mine[w] / total)
        present = [w for w in workers if any(shares[w])]
        labels = [f"{w} ({devices[w]})" if w in devices else w for w in present]
        if len(present) > MAX_WORKERS_DRAWN:  # the largest shares, the rest in one band
            top = set(sorted(present, key=lambda w: -sum(shares[w]))[: MAX_WORKERS_DRAWN - 1])
            rest = [w for w in present if w not in top]
            shares["others"] = [sum(col) for col in zip(*(shares[w] for w in rest), strict=True)]
            colors["others"] = "#999999"
            labels = [x for w, x in zip(present, labels, strict=True) if w in top]
            labels.append(f"{len(rest)} others")
            present = [w for w in present if w in top] + ["others"]
        # A step's plan holds for the whole step: draw step n as the band [n, n + 1), so a
        # change at step n (dashed line at n) lines up with the first step of the new plan.
        xs = [s.step for s in steps] + [steps[-1].step + 1]
        ax.stackplot(
            xs,
            [shares[w] + shares[w][-1:] for w in present],
            labels=labels,
            colors=[colors[w] for w in present],
            step="post",
            alpha=0.85,
        )
        for kind, x in changes_by_step(run):
            ax.axvline(x, color=EVENT_STYLE[kind][1], linestyle="--", linewidth=1.0)
        ax.set_xlim(xs[0], xs[-1])
        ax.set_ylim(0, 1)
        ax.set_xlabel("step")
        integer_steps(ax)
        ax.set_ylabel("share of micro-batches")
        fig.legend(loc="outside right upper", fontsize="small", title="worker")
    ax.set_title("Micro-batch share per worker")
    fig.savefig(path, format="png")


def plot_timeline(timeline: Timeline, path: Path) -> None:
    """One row per worker: a bar while alive, a marker per event, recoveries annotated."""
    from matplotlib.lines import Line2D

    lanes = timeline.lanes[:MAX_WORKERS_DRAWN]  # a row each: the first ones
    fig = figure(max(2.6, 0.55 * len(lanes) + 1.6))
    ax = fig.add_subplot()
    if not lanes:
        no_data(ax, "no workers logged")
        ax.set_title("Membership")
        fig.savefig(path, format="png")
        return
    colors = worker_colors([lane.worker for lane in lanes])
    row = {lane.worker: i for i, lane in enumerate(lanes)}
    for lane in lanes:
        spans = [(a, b - a) for a, b in lane.intervals]
        ax.broken_barh(spans, (row[lane.worker] - 0.3, 0.6), color=colors[lane.worker], alpha=0.45)
    for p in timeline.events:
        if p.time_s is None or p.event.worker not in row:
            continue
        e, y = p.event, row[p.event.worker]
        marker, color, _ = EVENT_STYLE[e.event]
        if e.event == "recover" and e.recovery_time_s:
            # the span recovery took (failure detected -> next completed step), ending here
            ax.plot([p.time_s - e.recovery_time_s, p.time_s], [y, y], color=color, linewidth=3)
        ax.plot(p.time_s, y, marker=marker, color=color, markeredgecolor="black", markersize=10)
        if e.event == "recover":
            parts = []
            if e.recovery_time_s is not None:
                parts.append(f"{e.recovery_time_s:.3g} s")
            if e.lost_steps is not None:
                parts.append(f"lost {e.lost_steps}")
            ax.annotate(
                ", ".join(parts) or "recovered",
                (p.time_s, y),
                xytext=(6, 9),
                textcoords="offset points",
                fontsize="small",
                color=color,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
            )
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{ln.worker} ({ln.device})" if ln.device else ln.worker for ln in lanes])
    ax.set_ylim(len(lanes) - 0.4, -0.7)  # first worker on top, room for annotations
    span = max(timeline.end_s - timeline.start_s, 1e-9)
    ax.set_xlim(timeline.start_s - 0.01 * span, timeline.end_s + 0.06 * span)
    ax.set_xlabel("wall time (s)")
    ax.grid(axis="x", alpha=0.3)
    handles = [
        Line2D([], [], marker=m, color=c, markeredgecolor="black", linestyle="", markersize=9)
        for m, c, _ in EVENT_STYLE.values()
    ]
    fig.legend(
        handles,
        [label for *_, label in EVENT_STYLE.values()],
        loc="outside lower center",
        ncols=len(EVENT_STYLE),
        fontsize="small",
        frameon=False,
    )
    title = "Membership"
    if len(lanes) < len(timeline.lanes):
        title += f" (the first {len(lanes)} of {len(timeline.lanes)} workers)"
    ax.set_title(title)
    fig.savefig(path, format="png")


def render_plots(run: Run, timeline: Timeline, directory: Path) -> dict[str, Path]:
    """Write all plots into `directory` (created if needed); return name -> PNG path."""
    directory.mkdir(parents=True, exist_ok=True)
    names = ["loss", "throughput", "share", "timeline"] + (["batch"] if adaptive(run) else [])
    names += (["link"] if compressed(run) else []) + (["cost"] if run.leases else [])
    paths = {name: directory / f"{name}.png" for name in names}
    # A value near the float limit (a diverged loss of 1e308) overflows the tick arithmetic of
    # matplotlib's locator, which warns on stderr; the plot is drawn all the same.
    with np.errstate(over="ignore", invalid="ignore"):
        plot_loss(run, paths["loss"])
        if "batch" in paths:
            plot_batch(run, paths["batch"])
        if "link" in paths:
            plot_link(run, paths["link"])
        plot_throughput(run, timeline, paths["throughput"])
        plot_share(run, paths["share"])
        plot_timeline(timeline, paths["timeline"])
        if "cost" in paths:
            plot_cost(run, paths["cost"])
    return paths
