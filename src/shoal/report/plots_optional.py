"""The plots a run gets only when it logged what they show: its adaptive batch (`batch.png`, when
`adaptive`), its exchange across slow links (`link.png`, when `compressed`: `--compress` with
two sites or more) and, for a run that bought its servers from a provider, its cost (`cost.png`,
from the lease lines). The batch and the link plots share one layout: a panel per step-line
field on a shared step axis, membership changes marked.
"""

from __future__ import annotations

from pathlib import Path

from shoal.report.load import Run
from shoal.report.plot_style import (
    EVENT_STYLE,
    changes_by_step,
    event_lines,
    figure,
    integer_steps,
    no_data,
)


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
    fig = figure(1.6 * len(names))
    axes = fig.subplots(len(names), 1, sharex=True)
    for ax, name, label in zip(axes, names, labels, strict=True):
        points = [(s.step, getattr(s, name)) for s in run.steps if getattr(s, name) is not None]
        if not points:
            no_data(ax, f"no {name.replace('_', ' ')} logged")
            continue
        draw(ax, name, [p[0] for p in points], [p[1] for p in points])
        event_lines(ax, changes_by_step(run))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    integer_steps(axes[-1])
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
    fig = figure(3.2)
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
