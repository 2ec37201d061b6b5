"""What every plot of the report shares, so that they read as one: the figure's size, one colour
per worker, and one style per membership event (shape and colour per kind, `EVENT_STYLE`, which
the page's event table uses too), drawn as dashed lines where the group changed.

Figures are built as `matplotlib.figure.Figure` objects, never through `pyplot`, so rendering a
report changes no process-wide state (backend, open figures) and works without a display.
matplotlib is imported inside the functions: importing `shoal.report` stays cheap.
"""

from __future__ import annotations

from typing import Any

from shoal.report.load import Run

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


def worker_colors(workers: list[str]) -> dict[str, Any]:
    """One stable colour per worker id (tab10, or tab20 beyond ten workers; cycles after that)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(workers) <= 10 else "tab20"]
    return {w: cmap(i % cmap.N) for i, w in enumerate(workers)}


def figure(height_in: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")


def integer_steps(ax: Any) -> None:
    """Steps are whole numbers: no tick at step 2.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def no_data(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def event_lines(ax: Any, positions: list[tuple[str, float]]) -> None:
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


def changes_by_step(run: Run) -> list[tuple[str, float]]:
    return [
        (e.event, float(e.step)) for e in run.events if e.step is not None and e.event != "recover"
    ]
