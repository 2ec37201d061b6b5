"""Pollux's job-load experiment: every policy on the 8 Pollux workloads at loads 0.5-2.0.

One command runs it all and prints Markdown (the tables of docs/notes/sim-fidelity.md):
1. average JCT per policy and load, mean +- sd over the 8 workloads (the replicates), and the
   full table, one row per (load, workload);
2. shoal against Pollux per load: mean ratio and wins;
3. the spot Philly samples (300 consecutive Philly jobs from seeded starts, 64 mixed GPUs, half
   the nodes spot with measured GCE lifetimes): average JCT and cost, mean +- sd over seeds.
It also writes a plot of mean average JCT against load (`--plot`, PNG by matplotlib).
Usage: python bench/sim_jobload.py [--policies a,b] [--workloads 1-8] [--loads 0.5,1.0]
       [--philly-seeds 1-5] [--procs N] [--plot PATH] [--json PATH]
Smoke: python bench/sim_jobload.py --policies tiresias --workloads 1 --loads 0.5 --philly-seeds 0
"""

from __future__ import annotations

import argparse
import json
import statistics
from multiprocessing import Pool
from pathlib import Path

import _args

from shoal.sim.policies import POLICIES
from shoal.sim.run import simulate
from shoal.sim.simulator import SimConfig

LOADS = ("0.5", "1.0", "1.5", "2.0")
PHILLY_CLUSTER, PHILLY_SPOT = "hetero-64", "0.5:gce"


def _run(case: tuple) -> dict:
    suite, policy, workload, cluster, spot, seed, load = case
    s = simulate(policy, workload, cluster, spot, SimConfig(seed=seed))
    return {"suite": suite, "policy": policy, "workload": workload, "load": load, "seed": seed,
            "avg_jct_s": s["avg_jct_s"], "cost_usd": s["total_cost_usd"],
            "finished": s["finished"], "jobs": s["jobs"]}  # fmt: skip


def _ms(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.0f}" if values else "-"
    return f"{statistics.mean(values):,.0f} +- {statistics.stdev(values):,.0f}"


def jobload_tables(rows: list[dict], policies: list[str], loads: list[str]) -> str:
    by = {(r["policy"], r["load"], r["workload"]): r["avg_jct_s"] for r in rows}
    workloads = sorted({r["workload"].split(":")[1] for r in rows}, key=int)
    head = "| load | " + " | ".join(policies) + " |\n|---" * 1 + "|---" * len(policies) + "|"
    out = ["Average JCT (s), mean +- sd over the workloads:", "", head]
    for load in loads:
        cells = [_ms([by[p, load, w] for (p, ld, w) in by if p == q and ld == load])
                 for q in policies]  # fmt: skip
        out.append(f"| {load} | " + " | ".join(cells) + " |")
    out += ["", "Every run, average JCT (s):", "", head.replace("| load |", "| load | workload |")]
    out[-1] = out[-1].replace("|---|", "|---|---|", 1)
    for load in loads:
        for w in workloads:
            name = f"pollux:{w}:{load}"
            cells = [
                f"{by[p, load, name]:,.0f}" if (p, load, name) in by else "-" for p in policies
            ]
            out.append(f"| {load} | {w} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def versus(rows: list[dict], loads: list[str], mine: str = "shoal", other: str = "pollux") -> str:
    by = {(r["policy"], r["load"], r["workload"]): r["avg_jct_s"] for r in rows}
    out = [f"| load | {mine} / {other}, mean +- sd | {mine} faster in | worst ratio |",
           "|---|---|---|---|"]  # fmt: skip
    for load in loads:
        pairs = [(by[mine, ld, w], by[other, ld, w]) for (p, ld, w) in by
                 if p == mine and ld == load and (other, ld, w) in by]  # fmt: skip
        if not pairs:
            continue
        ratios = [a / b for a, b in pairs]
        wins = sum(a < b for a, b in pairs)
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        out.append(f"| {load} | {statistics.mean(ratios):.3f} +- {sd:.3f} | "
                   f"{wins} of {len(pairs)} | {max(ratios):.3f} |")  # fmt: skip
    return "\n".join(out)


def philly_table(rows: list[dict], policies: list[str]) -> str:
    out = ["| policy | average JCT (s) | cost ($) |", "|---|---|---|"]
    for p in policies:
        runs = [r for r in rows if r["policy"] == p]
        if runs:
            jct = _ms([r["avg_jct_s"] for r in runs])
            out.append(f"| {p} | {jct} | {_ms([r['cost_usd'] for r in runs])} |")
    return "\n".join(out)


def plot(rows: list[dict], policies: list[str], loads: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for p in policies:
        means = [statistics.mean(r["avg_jct_s"] for r in rows if r["policy"] == p
                                 and r["load"] == ld) for ld in loads]  # fmt: skip
        ax.plot([float(ld) for ld in loads], [m / 3600 for m in means], marker="o", label=p)
    ax.set_xlabel("job load (x Pollux's workload arrival rate)")
    ax.set_ylabel("average JCT (h), mean of 8 workloads")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    policy = _args.names(POLICIES, "policy")
    ap.add_argument("--policies", type=policy, default=",".join(POLICIES), help="comma list")
    ap.add_argument(
        "--workloads", type=_args.span, default="1-8", help="Pollux workloads, N or LO-HI"
    )
    ap.add_argument("--loads", type=_args.names(LOADS, "load"), default=",".join(LOADS),
                    help="job loads, comma list")  # fmt: skip
    ap.add_argument("--philly-seeds", type=_args.span, default="1-5",
                    help="N or LO-HI (0: no Philly spot samples)")  # fmt: skip
    ap.add_argument("--procs", type=int, default=1, help="simulations run in parallel")
    ap.add_argument("--plot", type=Path, default=None, help="write the plot here (None: no plot)")
    ap.add_argument("--json", type=Path, default=None, help="write every run's row here")
    args = ap.parse_args()
    policies, loads = args.policies, args.loads
    if args.workloads and args.workloads[-1] > 8:
        ap.error(f"--workloads: Pollux's workloads are 1-8, not {args.workloads[-1]}")
    if args.procs < 1:
        ap.error(f"--procs must be at least 1, not {args.procs}")
    _args.check_out_file(ap, "--plot", args.plot)  # both written after the runs
    _args.check_out_file(ap, "--json", args.json)
    cases = [("jobload", p, f"pollux:{w}:{ld}", "pollux", None, 0, ld)
             for ld in loads for w in args.workloads for p in policies]  # fmt: skip
    cases += [("philly-spot", p, f"philly:300:{s}", PHILLY_CLUSTER, PHILLY_SPOT, s, None)
              for s in args.philly_seeds for p in policies]  # fmt: skip
    with Pool(args.procs) as pool:
        rows = pool.map(_run, cases, chunksize=1)
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobload = [r for r in rows if r["suite"] == "jobload"]
    philly = [r for r in rows if r["suite"] == "philly-spot"]
    print(jobload_tables(jobload, policies, loads), end="\n\n")
    if {"shoal", "pollux"} <= set(policies):
        print(versus(jobload, loads), end="\n\n")
    if philly:
        print("Philly spot samples, mean +- sd over seeds:\n\n" + philly_table(philly, policies))
    unfinished = [r for r in rows if r["finished"] < r["jobs"]]
    print(f"\n{len(rows)} runs; unfinished: {len(unfinished)}")
    if args.plot and jobload:
        plot(jobload, policies, loads, args.plot)


if __name__ == "__main__":
    main()
