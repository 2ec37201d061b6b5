"""How the parameter-server model's structure was chosen: candidates scored without 8-worker rows.

Each candidate is a step-time formula for a homogeneous cluster (every measured cluster is one
kind), fitted by the same least squares on log durations as `shoal.sim.transient_model.fit`.
Scores, none of which touches a held-out 8-worker row:
- in-sample: fitted on all 39 configurations, mean |error| and how many of the 32 multi-run
  configurations land within 1 sd;
- LOSO: over the sizes 2..7 (the 8-worker rows left out of everything), fit on the other sizes,
  predict the left-out one;
- 123->4: fit on 1-3 workers, predict 4; 124->567: fit on the size split's fit side (1, 2, 4
  workers), predict 5-7 (the rehearsal of predicting 8).
Candidates: `smooth-max` (the earlier model: a jitter-blurred maximum of the unloaded cycle and
the servers' bound), `mva` (exact Mean Value Analysis, exponential service, one queue of
S/P), `mva-fj` (the same, waiting for the slowest of P independent queues: H_P times one
queue's response), `kingman` (Kingman's heavy-traffic wait in a closed loop) and `kingman-fj`
(the same with the fork-join factor H_P on the wait). These are fitted on the runs' durations.
The Kingman loop fitted instead on the runs' steady times, a duration being that plus the start
offset measured on the fit's runs, is `kingman-steady` (the shipped model: `fit`);
`kingman-campaign` and `kingman-steady-campaign` add one factor on the on-demand campaign's
step times (that campaign ran slower than the model at every fitted size).
Every candidate is scored on durations (mean +- sd over runs), the quantity predicted.
Usage: python bench/transient_select.py [--json] [--quick] [CANDIDATE ...]   (all eight: about
15 s on one idle core; --quick scores in-sample only)
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace

from scipy.optimize import least_squares

from shoal.sim.transient_data import TOTAL_STEPS, Measurement, load_measurements
from shoal.sim.transient_model import fit

PS_FIELDS = ("latency_s", "ps_service_s", "service_sd_s", "cycle_sd_s", "local_update_s")


def _harmonic(p: int) -> float:
    return sum(1 / i for i in range(1, p + 1))


def _smooth_max(q, t0, n, d, p):
    e = n * d - t0
    return t0 + e / 2 + math.sqrt(e * e / 4 + q["jitter"] ** 2 * n)


def _mva(q, t0, n, d, p, fork_join=False):
    h = _harmonic(p) if fork_join else 1.0
    queue = response = 0.0
    for k in range(1, n + 1):  # exact MVA: an arrival sees the queue of k - 1 customers
        response = d * (1 + queue)
        queue = k / (t0 + h * response) * response
    return t0 + h * response


def _kingman_fj(q, t0, n, d, p):
    h, t = _harmonic(p), max(t0, n * d)
    for _ in range(40):  # w1 (w1 h + t0 - n d) = n (s^2 + (d a / t)^2) / 2, t = t0 + h w1
        v = n * (q["service_sd"] ** 2 + (d * q["cycle_sd"] / t) ** 2) / 2
        b = t0 - n * d
        t = t0 + h * (-b + math.sqrt(b * b + 4 * h * v)) / (2 * h)
    return t


CANDIDATES = {
    "smooth-max": (_smooth_max, {"jitter": 0.008}),
    "mva": (_mva, {}),
    "mva-fj": (lambda q, t0, n, d, p: _mva(q, t0, n, d, p, fork_join=True), {}),
    "kingman-fj": (_kingman_fj, {"service_sd": 0.01, "cycle_sd": 0.015}),
}


def _as_durations(rows: tuple[Measurement, ...]) -> tuple[Measurement, ...]:
    """The rows with their durations standing in for steady times and no offset: `fit` on these
    is the Kingman loop fitted on durations (the model shipped before the evaluation curves)."""
    return tuple(replace(m, steady_s=m.durations_s, offsets_s=(0.0,)) for m in rows)


def _with_campaign(rows: tuple[Measurement, ...]):
    """`fit` plus one factor on the on-demand campaign's steady times, fitted jointly."""
    first = fit(rows)
    kinds = sorted(first.compute_s)
    lone = any(m.num_ps == 0 for m in rows)

    def model(x):
        fields = dict(zip(PS_FIELDS, map(float, x[len(kinds) : -1]), strict=True))
        return replace(first, compute_s=dict(zip(kinds, map(float, x), strict=False)), **fields)

    def factor(m: Measurement, x) -> float:
        return float(x[-1]) if m.tier == "on_demand" else 1.0

    def residuals(x):
        mod = model(x)
        return [math.log(mod.steady_s(m) * factor(m, x) / m.steady_mean_s) for m in rows]

    x0 = [first.compute_s[k] for k in kinds] + [getattr(first, f) for f in PS_FIELDS] + [1.0]
    lower = [1e-6] * len(kinds) + [0.0] * 5 + [0.8]
    upper = [10.0] * len(kinds) + [1.0] * 4 + [1.0 if lone else 1e-12, 1.2]
    x = least_squares(residuals, x0, bounds=(lower, upper)).x
    mod = model(x)
    return lambda m: mod.steady_s(m) * factor(m, x) + mod.offset_s


def fit_candidate(name: str, rows: tuple[Measurement, ...]):
    """Predicted duration (s) as a function of a measurement, fitted on `rows`."""
    if name.startswith("kingman") and name != "kingman-fj":
        base = rows if "steady" in name else _as_durations(rows)
        return _with_campaign(base) if "campaign" in name else fit(base).duration_s
    step, extra = CANDIDATES[name]
    kinds = sorted({m.kind for m in rows})
    names = [*kinds, "latency", "service", "local", *extra]
    lone = any(m.num_ps == 0 for m in rows)

    def duration(q, m: Measurement) -> float:
        c = q[m.kind]
        if m.num_ps == 0:
            t = c + q["local"]
        else:
            p = m.num_ps
            t = step(q, c + q["latency"] / p, m.num_workers, q["service"] / p, p)
        return TOTAL_STEPS * t / m.num_workers

    def residuals(x):
        q = dict(zip(names, x, strict=True))
        return [math.log(duration(q, m) / m.mean_s) for m in rows]

    start = [
        0.9 * min(m.mean_s * m.num_workers / TOTAL_STEPS for m in rows if m.kind == k)
        for k in kinds
    ]
    start += [0.02, 0.02, 0.02 if lone else 0.0, *extra.values()]
    upper = [10.0] * len(kinds) + [1.0, 1.0, 1.0 if lone else 1e-12] + [1.0] * len(extra)
    best = None
    for latency in (0.0, 0.02, 0.05):  # the latency/queue split has local minima here
        start[len(kinds)] = latency
        r = least_squares(
            residuals, start, bounds=([1e-6] * len(kinds) + [0.0] * (3 + len(extra)), upper)
        )
        best = r if best is None or r.cost < best.cost else best
    q = dict(zip(names, best.x, strict=True))
    return lambda m: duration(q, m)


def _score(predict, rows) -> dict:
    errors = [predict(m) / m.mean_s - 1 for m in rows]
    zs = [(predict(m) - m.mean_s) / m.sd_s for m in rows if len(m.durations_s) > 1]
    return {
        "mean_abs_error_pct": round(float(100 * sum(map(abs, errors)) / len(errors)), 2),
        "within_1sd": int(sum(abs(z) <= 1 for z in zs)),
        "multi_run": len(zs),
    }


def score(name: str, quick: bool = False) -> dict:
    rows = load_measurements()
    sized = lambda sizes: tuple(m for m in rows if m.num_workers in sizes)  # noqa: E731
    out = {"candidate": name, "in_sample": _score(fit_candidate(name, rows), rows)}
    if quick:
        return out
    errors, within, total = [], 0, 0
    for left in range(2, 8):
        train = sized({1, 2, 3, 4, 5, 6, 7} - {left})
        s = _score(fit_candidate(name, train), sized({left}))
        errors.append(s["mean_abs_error_pct"])
        within, total = within + s["within_1sd"], total + s["multi_run"]
    out["loso_2_7"] = {
        "mean_abs_error_pct": round(sum(errors) / len(errors), 2),
        "within_1sd": within,
        "multi_run": total,
    }
    out["123->4"] = _score(fit_candidate(name, sized({1, 2, 3})), sized({4}))
    out["124->567"] = _score(fit_candidate(name, sized({1, 2, 4})), sized({5, 6, 7}))
    return out


NAMES = [
    "smooth-max",
    "mva",
    "mva-fj",
    "kingman",
    "kingman-fj",
    "kingman-campaign",
    "kingman-steady",
    "kingman-steady-campaign",
]


def main(as_json: bool, names: list[str] = NAMES, quick: bool = False) -> None:
    if not as_json:
        print(
            "| candidate | in-sample (39) | LOSO 2..7 | fit 1-3, predict 4 "
            "| fit 1,2,4, predict 5-7 |"
        )
        print("|---|---|---|---|---|")
    for name in names:
        s = score(name, quick)
        if as_json:
            print(json.dumps(s))
            continue
        cells = [
            f"{v['mean_abs_error_pct']:.2f} %, {v['within_1sd']}/{v['multi_run']}"
            for k, v in s.items()
            if k != "candidate"
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "candidates",
        nargs="*",
        metavar="CANDIDATE",
        help=f"the candidates to score (None: all eight: {', '.join(NAMES)})",
    )
    p.add_argument("--json", action="store_true", help="JSON lines, not a markdown table")
    p.add_argument("--quick", action="store_true", help="score in-sample only")
    args = p.parse_args()
    unknown = [name for name in args.candidates if name not in NAMES]
    if unknown:
        p.error(f"unknown candidate(s) {', '.join(map(repr, unknown))} (known: {', '.join(NAMES)})")
    main(args.json, args.candidates or NAMES, args.quick)
