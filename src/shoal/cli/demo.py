"""`shoal demo`: the digits job on a mixed emulated cluster and on one worker, side by side."""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile

DIGITS = pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="mixed cluster vs one worker: same bits, more throughput")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", default=None, help="keep the two runs here (default: a temp dir)")
    p.add_argument("--mixed", default="v100,k80,k80", help="the mixed cluster's worker spec")
    p.set_defaults(func=_demo)


def _shares(out: pathlib.Path, num_workers: int) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    totals = [0] * num_workers
    for row in rows:
        for w in row["workers"]:
            totals[w["rank"]] += w["micro_batches"]
    return [t / sum(totals) for t in totals]


def _demo(args: argparse.Namespace) -> int:
    from shoal.cluster import load_catalog
    from shoal.errors import UserError
    from shoal.launcher.local import RunSpec, run_local

    if not DIGITS.is_file():
        raise UserError(f"the demo needs {DIGITS} (run it from a source checkout)")
    root = pathlib.Path(args.out or tempfile.mkdtemp(prefix="shoal-demo-"))
    kinds = load_catalog().parse_workers(args.mixed)
    options = ["micro_batch_size=32", "global_batch_size=256"]  # M = 8 micro-batches per step
    runs = {}
    for name, workers in (("mixed", kinds), ("single", kinds[:1])):
        print(f"{name}: {','.join(workers)}")
        spec = RunSpec(str(DIGITS), workers, args.steps, str(root / name), options=options)
        runs[name] = (workers, run_local(spec))
    print()
    print(f"{'run':<8} {'workers':<16} {'samples/s':>10}  {'micro-batch share':<24} state_sha256")
    for name, (workers, result) in runs.items():
        shares = _shares(root / name, len(workers))
        share_text = " ".join(f"{k}:{s:.0%}" for k, s in zip(workers, shares, strict=True))
        print(
            f"{name:<8} {','.join(workers):<16} {result['samples_per_s']:>10,.0f}  "
            f"{share_text:<24} {result['state_sha256'][:16]}"
        )
    same = runs["mixed"][1]["state_sha256"] == runs["single"][1]["state_sha256"]
    speedup = runs["mixed"][1]["samples_per_s"] / runs["single"][1]["samples_per_s"]
    print()
    print(f"digests identical: {'YES' if same else 'NO'}   mixed/single throughput: {speedup:.2f}x")
    print(f"runs kept in {root}")
    return 0 if same else 1
