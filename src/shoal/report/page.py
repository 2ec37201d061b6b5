"""The report page: one self-contained HTML document (inline CSS, no scripts, no network).

This module turns a run's summary, timeline and plot file names into HTML text; it touches no
files. Every piece of text taken from the run (worker ids, devices, details, the directory
name) goes through `html.escape`, so a worker named `<script>` shows as text. Images are
referenced by relative URL so the page and its `report/` folder can be moved together.
"""

from __future__ import annotations

import html
from urllib.parse import quote

from shoal.report.plot_style import EVENT_STYLE
from shoal.report.summary import Summary
from shoal.report.timeline import Timeline

DASH = "\u2014"

# name -> (heading, caption saying how to read the plot)
FIGURES: dict[str, tuple[str, str]] = {
    "loss": (
        "Loss",
        "Training loss at each completed step. Dashed lines mark joins, leaves and failures; "
        "in exact mode the curve does not depend on them.",
    ),
    "batch": (
        "Adaptive batch",
        "Beside the loss: the global batch the policy chose for each step, the smoothed "
        "gradient noise scale (in samples), the cosine between the exact sums of the step's "
        "two halves of micro-batches (points: measured on decision steps only) and the "
        "learning-rate factor applied to the step. Computed from exact sums, so the same on "
        "any workers.",
    ),
    "cost": (
        "Cost",
        "Spend on servers bought from the provider against emulated time since the first group "
        "formed, stacked by device kind (per-second billing from each request to its release, "
        "revocation or the run's end). Red crosses mark spot revocations.",
    ),
    "throughput": (
        "Throughput",
        "Samples per second against wall time. The line breaks at each membership change: a "
        "gap is time in which no step completed (detecting a failure, re-planning, restoring "
        "state). After a join the level should rise if the new worker pulls its weight.",
    ),
    "share": (
        "Micro-batch share",
        "Each worker's fraction of the step's micro-batches. The plan gives faster devices "
        "more; the bands move when workers come and go.",
    ),
    "timeline": (
        "Membership timeline",
        "One row per worker: the bar is the time it was alive. Markers show joins, graceful "
        "leaves, abrupt failures and recoveries; a recovery is annotated with how long it "
        "took (thick line) and how many steps were lost.",
    ),
    "link": (
        "Across slow links",
        "With --compress and two sites or more: the throughput measured on the exchange "
        "between sites, the keep ratio each step sent (--compress auto chooses it from the "
        "measured rate), the step time and the exchange's time.",
    ),
}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1140px; margin: 24px auto; padding: 0 16px; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0; }
.dir { color: #666; margin-top: 4px; font-family: ui-monospace, monospace; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 28px; }
.summary { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr));
           gap: 10px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; background: #fafafa; }
.card .label { color: #666; font-size: 0.85em; }
.card .value { font-size: 1.25em; font-weight: 600; overflow-wrap: anywhere; }
.card.wide { grid-column: 1 / -1; }
.mono { font-family: ui-monospace, monospace; font-size: 0.95em !important; }
.warn { background: #fff4d6; border: 1px solid #e6c25a; padding: 8px 12px; border-radius: 6px; }
figure { margin: 12px 0 20px; }
figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; width: 100%; font-size: 0.92em; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #e4e4e4; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fbfbfb; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff;
         font-size: 0.85em; font-weight: 600; }
footer { color: #888; font-size: 0.85em; margin: 32px 0 12px; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float | int | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return DASH
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def _card(label: str, value: str, css: str = "") -> str:
    return (
        f'<div class="card {css}"><div class="label">{_e(label)}</div>'
        f'<div class="value">{_e(value)}</div></div>'
    )


def summary_html(s: Summary) -> str:
    recovery = _fmt(s.median_recovery_time_s, "s", 2)
    if s.recoveries:
        recovery += f" (of {s.recoveries})"
    cards = [
        _card("final step", _fmt(s.final_step)),
        _card("wall time", _fmt(s.wall_time_s, "s")),
        _card("samples/s", _fmt(s.samples_per_s)),
        _card("consistency", s.consistency or DASH),
        _card("joins / leaves / failures", f"{s.joins} / {s.leaves} / {s.failures}"),
        _card("lost steps (total)", str(s.lost_steps)),
        _card("median recovery time", recovery),
        _card("devices", ", ".join(s.devices) or DASH),
    ]
    if s.cost_usd is not None:
        revoked = f" ({s.revocations} revoked)" if s.revocations else ""
        cards.append(_card("cost (servers)", f"${s.cost_usd:.4f}{revoked}"))
    cards += [
        _card("state digest (sha256)", s.state_sha256 or DASH, "wide mono"),
    ]
    warn = ""
    if not s.from_result:
        warn = (
            '<p class="warn">No <code>result.json</code>: the run did not finish (or is still '
            "running). Final step, wall time and samples/s below are taken from "
            "<code>metrics.jsonl</code>.</p>"
        )
    return f'{warn}<div class="summary">{"".join(cards)}</div>'


def figures_html(images: dict[str, str]) -> str:
    parts = []
    for name, (title, caption) in FIGURES.items():
        if name not in images:
            continue
        parts.append(
            f'<h2 id="{_e(name)}">{_e(title)}</h2><figure>'
            f'<img src="{_e(quote(images[name]))}" alt="{_e(title)} plot">'
            f"<figcaption>{_e(caption)}</figcaption></figure>"
        )
    return "".join(parts)


def events_html(timeline: Timeline) -> str:
    if not timeline.events:
        return "<p>No membership changes: the same workers ran from start to finish.</p>"
    head = (
        "<tr><th>#</th><th>wall time (s)</th><th>step</th><th>event</th><th>worker</th>"
        "<th>device</th><th>recovery time (s)</th><th>lost steps</th><th>detail</th></tr>"
    )
    rows = []
    for i, p in enumerate(timeline.events, start=1):
        e = p.event
        _, color, label = EVENT_STYLE[e.event]
        badge = f'<span class="badge" style="background:{color}" title="{_e(label)}">'
        rows.append(
            f'<tr class="event-{_e(e.event)}"><td class="num">{i}</td>'
            f'<td class="num">{_e(_fmt(p.time_s, digits=2))}</td>'
            f'<td class="num">{_e(_fmt(e.step))}</td>'
            f"<td>{badge}{_e(e.event)}</span></td><td>{_e(e.worker)}</td>"
            f"<td>{_e(e.device or DASH)}</td>"
            f'<td class="num">{_e(_fmt(e.recovery_time_s, digits=2))}</td>'
            f'<td class="num">{_e(_fmt(e.lost_steps))}</td><td>{_e(e.detail or "")}</td></tr>'
        )
    return f'<table class="events"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def render_page(title: str, summary: Summary, timeline: Timeline, images: dict[str, str]) -> str:
    """The whole HTML document; `images` maps plot name to its URL relative to the page."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>shoal report: {_e(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>shoal run report</h1><p class="dir">{_e(title)}</p>'
        f"<h2>Summary</h2>{summary_html(summary)}"
        f"{figures_html(images)}"
        f'<h2 id="events">Membership events</h2>{events_html(timeline)}'
        "<footer>Written by <code>shoal report</code> from metrics.jsonl and result.json. "
        "Times are wall-clock seconds since the run started.</footer>"
        "</body></html>\n"
    )
