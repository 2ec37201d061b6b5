"""The report's PNG plots (a fifth for a run with an adaptive batch), drawn with matplotlib's
object API on the Agg renderer.

Figures are built as `matplotlib.figure.Figure` objects, never through `pyplot`, so rendering a
report changes no process-wide state (backend, open figures) and works without a display.
matplotlib is imported inside the functions: importing `shoal.report` stays cheap. Each worker
keeps one colour across all plots, and membership events are drawn in the same style everywhere
(shape and colour per kind, see `EVENT_STYLE`), so a dip in throughput lines up by eye with the
failure that caused it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shoal.metrics.training import StepLine
from shoal.report.load import Run
from shoal.report.timeline import Timeline, worker_order

# kind -> (marker, colour, legend label). Colours are chosen apart from the worker palette.
EVENT_STYLE: dict[str, tuple[str, str, str]] = {
    "join": ("^", "#1b9e77", "join"),
    "notice": ("v", "#e7298a", "notice"),
    "stall": ("D", "#7570b3", "stall (injected)"),
    "leave": ("s", "#e6ab02", "leave (graceful)"),
    "fail": ("X", "#d62728", "failure (abrupt)"),
    "recover": ("o", "#3366cc", "recovery"),
}
DPI = 100
WIDTH_IN = 11.0


# Workers drawn one by one (a band, a row, a legend entry each): a run of 4,096 workers took
# 75 s and 1.2 GB (a timeline 2,250 inches tall); 20,000 never finished. Past it the share plot
# bands the smallest together and the timeline draws the first ones.
MAX_WORKERS_DRAWN = 16  # a legend of 16 fits beside the share plot


def worker_colors(workers: list[str]) -> dict[str, Any]:
    """One stable colour per worker id (tab10, or tab20 beyond ten workers; cycles after that)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(workers) <= 10 else "tab20"]
    return {w: cmap(i % cmap.N) for i, w in enumerate(workers)}


def _figure(height_in: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")


def _integer_steps(ax: Any) -> None:
    """Steps are whole numbers: no tick at step 2.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _no_data(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _event_lines(ax: Any, positions: list[tuple[str, float]]) -> None:
    """Faint vertical lines at membership changes; one legend entry per kind present."""
    labelled: set[str] = set()
    for kind, x in positions:
        _, color, label = EVENT_STYLE[kind]
        ax.axvline(
            x,
            color=color,
            linestyle="--",
            linewidth=1.0,
            alpha=0.7,
            label=None if kind in labelled else label,
        )
        labelled.add(kind)


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


def _changes_by_step(run: Run) -> list[tuple[str, float]]:
    return [
        (e.event, float(e.step)) for e in run.events if e.step is not None and e.event != "recover"
    ]


def plot_loss(run: Run, path: Path) -> None:
    """Loss against step, with dashed lines where membership changed."""
    fig = _figure(3.6)
    ax = fig.add_subplot()
    points = [(s.step, s.loss) for s in run.steps if s.loss is not None]
    if not points:
        _no_data(ax, "no loss logged")
    else:
        ax.plot([p[0] for p in points], [p[1] for p in points], color="#333", linewidth=1.5)
        _event_lines(ax, _changes_by_step(run))
        ax.set_xlabel("step")
        _integer_steps(ax)
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
    ax.set_title("Loss")
    fig.savefig(path, format="png")


def adaptive(run: Run) -> bool:
    """Whether the run logged adaptive-batch fields (a fixed batch logs none)."""
    return any(s.lr_factor is not None or s.noise_scale is not None for s in run.steps)


# (field of StepLine, axis label, draw as points: measured on some steps only)
BATCH_PANELS = (
    ("loss", "loss", False),
    ("global_batch_size", "global batch\n(samples)", False),
    ("noise_scale", "noise scale\n(samples)", False),
    ("similarity", "similarity\n(cosine)", True),
    ("lr_factor", "LR factor", False),
)


def _step_panels(run: Run, path: Path, title: str, names: list[str], labels: list[str], draw):
    """One panel per StepLine field against step on a shared axis, membership changes marked;
    `draw(ax, name, xs, ys)` plots a field's logged values (a field never logged: a note)."""
    fig = _figure(1.6 * len(names))
    axes = fig.subplots(len(names), 1, sharex=True)
    for ax, name, label in zip(axes, names, labels, strict=True):
        points = [(s.step, getattr(s, name)) for s in run.steps if getattr(s, name) is not None]
        if not points:
            _no_data(ax, f"no {name.replace('_', ' ')} logged")
            continue
        draw(ax, name, [p[0] for p in points], [p[1] for p in points])
        _event_lines(ax, _changes_by_step(run))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    _integer_steps(axes[-1])
    axes[0].set_title(title)
    fig.savefig(path, format="png")


def plot_batch(run: Run, path: Path) -> None:
    """Loss, global batch, noise scale, halves' similarity and LR factor against step, one
    panel each on a shared step axis, so a batch change lines up with what caused it."""
    as_points = {name for name, _, points in BATCH_PANELS if points}

    def draw(ax, name, xs, ys):
        if name in as_points:
            ax.plot(xs, ys, "o", color="#3366cc", markersize=4)
        else:
            drawstyle = "steps-post" if name == "global_batch_size" else "default"
            ax.plot(xs, ys, color="#333", linewidth=1.5, drawstyle=drawstyle)

    names, labels = [p[0] for p in BATCH_PANELS], [p[1] for p in BATCH_PANELS]
    _step_panels(run, path, "Adaptive batch", names, labels, draw)


def plot_throughput(run: Run, timeline: Timeline, path: Path) -> None:
    """Samples/s against wall time (against step when the run logged no wall times)."""
    fig = _figure(3.6)
    ax = fig.add_subplot()
    rows = [(s, _samples_per_s(s)) for s in run.steps]
    rows = [(s, v) for s, v in rows if v is not None]
    by_wall = bool(rows) and all(s.wall_time_s is not None for s, _ in rows)
    if not rows:
        _no_data(ax, "no throughput logged")
    else:
        if by_wall:
            marks = [
                (p.event.event, p.time_s)
                for p in timeline.events
                if p.time_s is not None and p.event.event != "recover"
            ]
        else:
            marks = _changes_by_step(run)
        points = sorted((s.wall_time_s if by_wall else s.step, v) for s, v in rows)
        # A change logged at wall time t happened after the step completed at or before t; one
        # logged at step n happened while step n ran, i.e. between steps n - 1 and n.
        cuts = [x if by_wall else x - 0.5 for _, x in marks]
        xs, ys = _break_at(points, cuts)
        ax.plot(xs, ys, color="#333", linewidth=1.5, marker=".", markersize=3)
        _event_lines(ax, marks)
        ax.set_xlabel("wall time (s)" if by_wall else "step")
        if not by_wall:
            _integer_steps(ax)
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize="small")
    ax.set_title("Throughput")
    fig.savefig(path, format="png")


def plot_share(run: Run, path: Path) -> None:
    """Each worker's fraction of the step's micro-batches, stacked, against step."""
    fig = _figure(3.8)
    ax = fig.add_subplot()
    steps = [s for s in run.steps if sum(w.micro_batches for w in s.workers) > 0]
    if not steps:
        _no_data(ax, "no micro-batch assignments logged")
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
        for kind, x in _changes_by_step(run):
            ax.axvline(x, color=EVENT_STYLE[kind][1], linestyle="--", linewidth=1.0)
        ax.set_xlim(xs[0], xs[-1])
        ax.set_ylim(0, 1)
        ax.set_xlabel("step")
        _integer_steps(ax)
        ax.set_ylabel("share of micro-batches")
        fig.legend(loc="outside right upper", fontsize="small", title="worker")
    ax.set_title("Micro-batch share per worker")
    fig.savefig(path, format="png")


def plot_timeline(timeline: Timeline, path: Path) -> None:
    """One row per worker: a bar while alive, a marker per event, recoveries annotated."""
    from matplotlib.lines import Line2D

    lanes = timeline.lanes[:MAX_WORKERS_DRAWN]  # a row each: the first ones
    fig = _figure(max(2.6, 0.55 * len(lanes) + 1.6))
    ax = fig.add_subplot()
    if not lanes:
        _no_data(ax, "no workers logged")
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
    names += ["link"] if compressed(run) else []
    paths = {name: directory / f"{name}.png" for name in names}
    plot_loss(run, paths["loss"])
    if "batch" in paths:
        plot_batch(run, paths["batch"])
    if "link" in paths:
        plot_link(run, paths["link"])
    plot_throughput(run, timeline, paths["throughput"])
    plot_share(run, paths["share"])
    plot_timeline(timeline, paths["timeline"])
    if run.leases:
        paths["cost"] = directory / "cost.png"
        plot_cost(run, paths["cost"])
    return paths


def cost_by_kind(run: Run, t_s: float) -> dict[str, float]:
    """USD spent by `t_s` per device kind, from the lease lines (open -> close or still open)."""
    opened = {x.server: x for x in run.leases if x.action == "open"}
    closed = {x.server: x.t_s for x in run.leases if x.action == "close"}
    out: dict[str, float] = {}
    for server, x in opened.items():
        end = min(t_s, closed.get(server) or t_s)
        usd = (x.usd_per_hour or 0.0) * max(0.0, end - (x.t_s or 0.0)) / 3600.0
        out[x.device or "?"] = out.get(x.device or "?", 0.0) + usd
    return out


def plot_cost(run: Run, path: Path) -> None:
    """Cumulative cost over emulated time, stacked by kind, revocations marked."""
    times = sorted({x.t_s or 0.0 for x in run.leases})
    end = times[-1] if times else 1.0
    grid = [end * i / 200 for i in range(201)]
    kinds = sorted({x.device or "?" for x in run.leases})
    series = [[cost_by_kind(run, t).get(k, 0.0) for t in grid] for k in kinds]
    fig = _figure(3.2)
    ax = fig.add_subplot()
    ax.stackplot(grid, *series, labels=kinds, alpha=0.8)
    revoked = [x.t_s or 0.0 for x in run.leases if x.action == "close" and x.cause == "revoked"]
    for t in revoked:
        total = sum(cost_by_kind(run, t).values())
        ax.plot([t], [total], marker="X", color=EVENT_STYLE["fail"][1], markersize=9)
    ax.set_xlabel("emulated time since the first group (s)")
    ax.set_ylabel("spent (USD)")
    ax.set_title(f"Cost by kind ({len(revoked)} revocations marked)")
    ax.legend(loc="upper left", fontsize="small", frameon=False)
    fig.savefig(path, format="png")


def compressed(run: Run) -> bool:
    """Whether the run logged an exchange across sites (`--compress` with two sites or more)."""
    return any(s.keep_ratio is not None for s in run.steps)


# (field of StepLine, axis label, log scale)
LINK_PANELS = (
    ("link_mbit_s", "link rate\n(Mbit/s, measured)", True),
    ("keep_ratio", "keep ratio", True),
    ("step_time_s", "step time (s)", False),
    ("exchange_s", "exchange (s)", False),
)


def plot_link(run: Run, path: Path) -> None:
    """Across slow links: the measured link throughput, the keep ratio the step used, the
    step time and the exchange time, on a shared step axis, so a change of the link's rate
    lines up with the controller's answer (`--compress auto`) and what it cost."""
    log_scale = {name for name, _, log in LINK_PANELS if log}

    def draw(ax, name, xs, ys):
        drawstyle = "steps-post" if name == "keep_ratio" else "default"
        ax.plot(xs, ys, color="#333", linewidth=1.5, drawstyle=drawstyle)
        if name in log_scale and min(ys) > 0:
            ax.set_yscale("log")

    names, labels = [p[0] for p in LINK_PANELS], [p[1] for p in LINK_PANELS]
    _step_panels(run, path, "Across slow links", names, labels, draw)
