"""Does the goodput model reproduce the runs it is built from? Steps per validation run.

Each Pollux application was trained to the end at several fixed batches M (`validation-M.csv`:
per epoch its progress, iteration and logged gradient statistics). The shared model
(`shoal.perf.goodput`) counts a step at M as r(M / M0) iterations of progress, r from the
statistics interpolated at the step's progress; so a job at M alone should take the run's
iterations. Three tables, printed as JSON lines (`--json`) or Markdown:

1. in-sample: per app and batch, the measured iterations and `GoodputModel.steps_between`;
2. per row: the progress per step each epoch measured (its progress over its iterations)
   against r at the statistics logged at the epoch's end, for the first epoch and the rest;
3. held out: each interior batch predicted from its two neighbours only, by the model's rule
   (their statistics, linear in log M) and by the measured progress per step (geometric mean in
   log M), against the measured iterations.

    PYTHONPATH=src python bench/goodput_steps.py          # about 2 s
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import statistics
from importlib import resources

from shoal.perf.goodput import gain, goodput_model
from shoal.perf.profiles import APPS


def run_rows(app: str, batch: float) -> list[dict[str, float]]:
    path = resources.files("shoal.data").joinpath(
        "pollux", "traces", app, f"validation-{int(batch)}.csv"
    )
    with path.open() as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def per_step(rows: list[dict[str, float]]) -> tuple[list[float], list[float]]:
    """(epoch starts, measured progress per step of each epoch), increasing rows only."""
    starts, rates, p0, i0 = [], [], 0.0, 0.0
    for row in rows:
        p, i = row["progress"], row["iteration"]
        if p > p0 and i > i0:
            starts.append(p0)
            rates.append((p - p0) / (i - i0))
            p0, i0 = p, i
    return starts, rates


def rate_at(curve: tuple[list[float], list[float]], progress: float) -> float:
    starts, rates = curve
    return rates[max(0, bisect.bisect_right(starts, progress) - 1)]


def in_sample() -> list[dict]:
    out = []
    for app in APPS:
        model = goodput_model(app)
        for batch in model.profile.grad_batches:
            rows = run_rows(app, batch)
            measured = rows[-1]["iteration"]
            steps = model.steps_between(batch, 0.0, rows[-1]["progress"])
            out.append(_row("in-sample", app, batch, measured, model=steps))
    return out


def epochs() -> list[dict]:
    """Measured progress per step against r at the epoch's logged statistics."""
    out = []
    for app in APPS:
        prof = goodput_model(app).profile
        for batch in prof.grad_batches[1:]:
            rows, p0, i0, ratios = run_rows(app, batch), 0.0, 0.0, []
            for row in rows:
                if row["iteration"] > i0:
                    measured = (row["progress"] - p0) / (row["iteration"] - i0)
                    r = gain(batch, prof.init_batch_size, row["grad_sqr"], row["grad_var"])
                    ratios.append(measured / r)
                p0, i0 = row["progress"], row["iteration"]
            rest = [abs(r - 1) for r in ratios[1:]]
            out.append(
                {
                    "table": "epochs",
                    "app": app,
                    "batch": int(batch),
                    "first_epoch_measured_over_r": round(ratios[0], 2),
                    "later_epochs_median_abs_dev": round(statistics.median(rest), 4),
                }
            )
    return out


def held_out() -> list[dict]:
    out = []
    for app in APPS:
        prof = goodput_model(app).profile
        batches, m0, cuts = prof.grad_batches, prof.init_batch_size, [0.0, *prof.grad_progress]
        for j in range(1, len(batches) - 1):
            lo, hi, batch = batches[j - 1], batches[j + 1], batches[j]
            w = math.log(batch / lo) / math.log(hi / lo)
            # the neighbours' logged statistics as the model reads them (linear between rows)
            stats_lo, stats_hi = prof.grad_curves[j - 1].at, prof.grad_curves[j + 1].at
            c_lo, c_hi = per_step(run_rows(app, lo)), per_step(run_rows(app, hi))
            rows = run_rows(app, batch)
            end = rows[-1]["progress"]
            points = [c for c in cuts if c < end] + [end]
            by_stats = by_rate = 0.0
            for a, b in zip(points, points[1:], strict=False):
                mid = (a + b) / 2
                (s1, v1), (s2, v2) = stats_lo(mid), stats_hi(mid)
                by_stats += (b - a) / gain(batch, m0, s1 + w * (s2 - s1), v1 + w * (v2 - v1))
                r1, r2 = rate_at(c_lo, mid), rate_at(c_hi, mid)
                by_rate += (b - a) / (r1 ** (1 - w) * r2**w)
            measured = rows[-1]["iteration"]
            out.append(_row("held-out", app, batch, measured, stats=by_stats, rate=by_rate))
    return out


def _row(table: str, app: str, batch: float, measured: float, **predicted: float) -> dict:
    row = {"table": table, "app": app, "batch": int(batch), "measured": round(measured)}
    for name, steps in predicted.items():
        row[name] = round(steps)
        row[f"{name}_error"] = round(steps / measured - 1, 4)
    return row


def summary(rows: list[dict], name: str) -> str:
    errors = [r[f"{name}_error"] for r in rows]
    worst = max(errors, key=abs)
    mean = sum(abs(e) for e in errors) / len(errors)
    return f"{name}: mean |error| {mean:.1%}, worst {worst:+.1%}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="JSON lines instead of Markdown")
    args = p.parse_args(argv)
    tables = {"in-sample": in_sample(), "epochs": epochs(), "held-out": held_out()}
    if args.json:
        for rows in tables.values():
            for row in rows:
                print(json.dumps(row))
        return
    for name, rows in tables.items():
        keys = [k for k in rows[0] if k != "table"]
        print(f"\n### {name}\n\n| {' | '.join(keys)} |\n|{'---|' * len(keys)}")
        for row in rows:
            print("| " + " | ".join(_cell(k, row[k]) for k in keys) + " |")
    print()
    print(summary(tables["in-sample"], "model"))
    print(summary(tables["held-out"], "stats"), "|", summary(tables["held-out"], "rate"))


def _cell(key: str, value) -> str:
    if key.endswith("_error"):
        return f"{value:+.1%}"
    if key.endswith("_dev"):
        return f"{value:.1%}"
    return f"{value:,}" if isinstance(value, int) else str(value)


if __name__ == "__main__":
    main()
