"""Training over slow links (issue 15): time to a target validation loss, side by side.

On the test bed (`bench/slowlink/testbed.py`: two sites as network namespaces, one worker each,
links shaped with tc tbf, torchrun's c10d rendezvous across them), at each link rate, every
side trains the same job from the same initial weights and data order:

    ddp              torch DDP, gloo, dense all-reduce every step (the yardstick)
    powersgd         DDP with torch's PowerSGD comm hook (rank --powersgd-rank)
    shoal-dense      shoal's exact step (one dense exact sum across the sites)
    shoal-blocktopk  shoal, --compress blocktopk:KEEP (issue 15, h15a's flag)
    shoal-blocktopk-pipe  the same with --pipeline (staleness 1: step t's exchange runs
                     under step t+1's compute)
    shoal-auto       shoal, --compress auto (the bandwidth controller picks KEEP)
    shoal-local      shoal, --local-steps H (DiLoCo: H steps per site, then an outer step)
    shoal-local-overlap  shoal-local with --outer-overlap D (the exchange under D inner steps)
    shoal-local-overlap-fast  the same with --consistency fast: inside a one-worker site the
                     exact mode's fixed-point sum buys nothing (a local-update run is already
                     tied to its sites), and it costs about a fifth of a step (py-spy)

A side whose flag this shoal does not have yet is reported "unavailable", not run.

Validation: a side's models every eval_every steps (10) are evaluated after the run, off the
clock. A side's training time is the sum of its step times (start-up, evaluation and the end
of run excluded); its time to target is that sum up to the first evaluated step whose
validation loss is <= the target. Where the models come from:
- ddp, powersgd: copied to memory during the timed run (outside the step's clock).
- the shoal sides with a fixed trajectory (dense, blocktopk, blocktopk-pipe, local,
  local-overlap): from a replay. Writing a checkpoint is not free (the steps after one took
  100-150 ms more), so the timed run on the shaped link writes none but the final one (after
  the last step, off the clock); a second run of the same job, on a fast link (FAST_MBIT, still
  two sites on the bed), writes one every eval_every steps, hard-linked as it appears. Such
  a run is deterministic for a fixed assignment of micro-batches to sites (docs/consistency.md)
  and a fixed keep, H or staleness makes the link rate no part of it, so one replay per model
  serves every rate. Every shoal run pins the split (at most ceil(M / sites) micro-batches per
  worker: 1 of 2 here, what the planner picks anyway while the sites run at one speed), and
  the row carries both final state_sha256: if they differ, the row is an error, not a time.
- shoal-auto: from its timed run's own checkpoints (on the clock, as before): its keep follows
  the measured bandwidth, so a replay would not retrace it. The table's footnote says so.
The target defaults to 1.02 x the dense DDP's final validation loss at the first rate (so
"reached" also means "within 2 % of dense"); --target MODEL=LOSS fixes it. For shoal-local
the models evaluated mid-run are rank 0's site's (the sites meet every H steps; the final model
is the one all sites share), so its curve is, if anything, pessimistic.

Models (see docs/notes/local-update.md for why these sizes):
- transformer: examples/transformer.py at dim 256 (1.6 M parameters, a 6.3 MB dense
  gradient), micro-batch 8, global batch 16, 200 steps: at 100 Mbit/s a dense exchange
  takes ~0.55 s against tens of ms of compute, so the link dominates, yet DDP's run takes
  about two minutes. Validation: 1024 fresh sequences (a seed the job never trains on).
- digits: examples/digits.py (the CNN, 0.04 M parameters): a model too small for the link to
  matter much, the contrast. Validation: the whole digits set in eval mode (the job has no
  held-out split, so this is a training-set loss; said so in the table).

    sudo python bench/slowlink_train.py --rates 100,500,1000          # the real run
    sudo python bench/slowlink_train.py --smoke                       # seconds: it runs at all
    sudo python bench/slowlink_train.py --smoke --models digits       # the digits side's smoke
prints, per model and rate, a table of throughput and time to target with ratios against DDP,
and writes every row to OUT/results.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import pathlib
import signal
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "src"), str(HERE)]

import _args  # noqa: E402
from slowlink.results import (  # noqa: E402
    IN_RUN,
    curve,
    final_digest,
    summarize,
    table,
    val_loss,
    validation,
)
from slowlink.sides import SIDES, Model, run_side, side_argv, worker_script  # noqa: E402
from slowlink.testbed import RDZV_PORT, SlowLinkBed, bed_available  # noqa: E402

FAST_MBIT = 10_000.0  # the replays' link: fast enough that it is not what bounds them


MODELS = {
    "transformer": Model(
        "examples/transformer.py",
        ("dim=256", "micro_batch_size=8", "global_batch_size=16", "lr=0.001"),
        steps=200,
        eval_every=10,
    ),
    "digits": Model("examples/digits.py", ("micro_batch_size=16", "global_batch_size=32"), 300, 10),
}
SMOKE = {
    "transformer": Model(
        "examples/transformer.py",
        ("dim=32", "micro_batch_size=4", "global_batch_size=8"),
        steps=4,
        eval_every=2,
    ),
    "digits": Model("examples/digits.py", ("micro_batch_size=16", "global_batch_size=32"), 4, 2),
}


@dataclasses.dataclass(frozen=True)
class SideRun:
    """One side of one model on the bed: what its runs (timed, replay) have in common."""

    bed: SlowLinkBed
    model_name: str
    model: Model
    side: str
    steps: int
    extra: tuple[str, ...]
    work: pathlib.Path

    def script(self, out: pathlib.Path, checkpoints: bool) -> list[str]:
        return worker_script(self.side, self.model, self.steps, out, list(self.extra), checkpoints)


def bench_model(bed, name, model, rates, sides, args, work, results) -> None:
    job, batches = validation(name, model)

    def evaluate(states: dict[int, dict]) -> dict[int, float]:
        return {s: val_loss(job, batches, st) for s, st in sorted(states.items())}

    # shoal sides: at most ceil(M / sites) micro-batches per worker, so the split between the
    # sites (which a compressed or local-update trajectory depends on) is the same in every run
    pin = ("--max-micro-batches", str(-(-job.num_micro_batches // bed.num_sites)))
    target, replays = args.targets.get(name), {}
    for rate in rates:
        bed.set_rate(rate)
        rows = []
        for side in sides:
            row = {"model": name, "rate_mbit": rate, "side": side}
            extra = side_argv(side, args)
            if extra is None:
                rows.append({**row, "status": "unavailable (no such flag yet)"})
                continue
            steps = model.steps * (args.local_budget if side.startswith("shoal-local") else 1)
            extra = tuple(extra) + (() if side in ("ddp", "powersgd") else pin)
            run = SideRun(bed, name, model, side, int(steps), extra, work)
            try:
                times, losses, digests = timed_and_curve(run, rate, args, evaluate, replays)
            except RuntimeError as exc:
                rows.append({**row, "status": f"failed: {str(exc)[-300:]}"})
                continue
            if target is None and side == "ddp":  # within 2 % of dense DDP's final loss
                target = 1.02 * losses[max(losses)]
            rows.append({**row, **summarize(side, times, losses, target or -math.inf)})
            rows[-1].update(digests, val_curve=losses)
            replayed_as = digests.get("replay_sha256")
            if replayed_as is not None and replayed_as != digests["state_sha256"]:
                # the replay did not retrace the timed run: its curve is not this run's
                rows[-1].update(time_to_target_s=None, target_step=None, final_val_loss=None)
                rows[-1]["status"] = "error: the replay's state_sha256 differs (no curve)"
        for r in rows:
            results.write(json.dumps(r) + "\n")
        print(f"\n## {name} at {rate:g} Mbit/s (2 sites, 1 worker each)\n{table(rows)}", flush=True)


def timed_and_curve(run: SideRun, rate, args, evaluate, replays) -> tuple[list, dict, dict]:
    """One side's timed run at `rate`: its step times, its validation curve (from the run
    itself, or from the side's replay, made once per model on a fast link) and the digests."""
    out = run.work / f"{run.model_name}-{rate:g}-{run.side}"
    replayed = run.side not in IN_RUN
    run_side(run.bed, run.script(out, not replayed), out, next_port(args), args.side_timeout)
    times, states = curve(run.side, out)
    if run.side in ("ddp", "powersgd"):
        return times, evaluate(states), {"curve": "in-run"}
    digests = {"state_sha256": final_digest(out)}
    if not replayed:
        return times, evaluate(states), {**digests, "curve": "in-run"}
    if run.side not in replays:  # the trajectory does not depend on the rate: one per model
        replays[run.side] = replay(run, rate, args, evaluate)
    if isinstance(replays[run.side], RuntimeError):
        raise RuntimeError(f"replay: {replays[run.side]}")
    digest, losses = replays[run.side]
    return times, losses, {**digests, "replay_sha256": digest, "curve": "replay"}


def replay(run: SideRun, rate, args, evaluate) -> tuple[str, dict] | RuntimeError:
    """The side again with a checkpoint every eval_every steps, on a fast link: its final
    digest and its validation curve (or the error, kept so later rates do not retry it)."""
    out = run.work / f"{run.model_name}-replay-{run.side}"
    run.bed.set_rate(FAST_MBIT)
    try:
        run_side(run.bed, run.script(out, True), out, next_port(args), args.side_timeout)
        return final_digest(out), evaluate(curve(run.side, out)[1])
    except RuntimeError as exc:
        return exc
    finally:
        run.bed.set_rate(rate)


def next_port(args) -> int:
    args.port += 1  # a fresh rendezvous port per job: the last one may linger
    return args.port


def _target(text: str) -> tuple[str, float]:
    """MODEL=LOSS: a model's target validation loss, above 0 (argparse type)."""
    name, _, loss = text.partition("=")
    if name not in MODELS:
        raise argparse.ArgumentTypeError(
            f"not MODEL=LOSS with a model of {', '.join(MODELS)}: {text!r}"
        )
    try:
        value = float(loss)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"not MODEL=LOSS with a loss above 0: {text!r}")
    return name, value


def check_args(parser: argparse.ArgumentParser, args) -> None:
    """Bounds, before the bed is built or any side runs."""
    if not 0 < args.keep < 1:
        parser.error(f"--keep must be a ratio between 0 and 1 (both excluded), not {args.keep}")
    for flag in ("local_steps", "outer_overlap", "powersgd_rank"):
        if getattr(args, flag) < 1:
            value = getattr(args, flag)
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, not {value}")
    for flag in ("local_budget", "side_timeout"):
        if not 0 < getattr(args, flag) < math.inf:
            value = getattr(args, flag)
            parser.error(f"--{flag.replace('_', '-')} must be a number above 0, not {value}")
    _args.check_out_dir(parser, "--out", args.out)


def parse(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--rates", type=_args.rates, default="100,500,1000", help="link rates, Mbit/s"
    )
    parser.add_argument(
        "--models",
        type=_args.names(MODELS, "model"),
        default=None,
        help="comma list (None: transformer,digits; --smoke: transformer)",
    )
    parser.add_argument(
        "--sides", type=_args.names(SIDES, "side"), default=",".join(SIDES), help="comma list"
    )
    parser.add_argument("--keep", type=float, default=0.01, help="shoal-blocktopk's KEEP")
    parser.add_argument("--local-steps", type=int, default=20, help="shoal-local's H")
    parser.add_argument("--outer-overlap", type=int, default=10, help="the overlap side's D")
    parser.add_argument("--local-budget", type=float, default=2.0, help="x steps, shoal-local")
    parser.add_argument("--powersgd-rank", type=int, default=4, help="the powersgd side's rank")
    parser.add_argument(
        "--target",
        type=_target,
        action="append",
        default=[],
        metavar="MODEL=LOSS",
        help="a model's target validation loss, repeatable (none: 1.02 x dense DDP's final loss)",
    )
    parser.add_argument("--side-timeout", type=float, default=900.0, help="seconds per side")
    parser.add_argument(
        "--out", type=pathlib.Path, default=None, help="runs and results.jsonl (None: a temp dir)"
    )
    parser.add_argument("--smoke", action="store_true", help="one rate, a tiny model: seconds")
    args = parser.parse_args(argv)
    check_args(parser, args)
    args.targets = dict(args.target)
    args.port = RDZV_PORT + 100
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    reason = bed_available()
    if reason:
        print(f"slowlink_train: error: {reason}", file=sys.stderr)
        return 2
    names = args.models or (["transformer"] if args.smoke else ["transformer", "digits"])
    models = {m: (SMOKE if args.smoke else MODELS)[m] for m in names}
    rates = [1000.0] if args.smoke else args.rates
    if args.smoke:
        args.local_steps, args.side_timeout = 2, 180.0
    args.outer_overlap = min(args.outer_overlap, args.local_steps)
    sides = args.sides
    work = args.out or pathlib.Path(tempfile.mkdtemp(prefix="slowlink-train-"))
    work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the bed is torn down on exit
    with SlowLinkBed(2, rates[0]) as bed, open(work / "results.jsonl", "a") as results:
        for name, model in models.items():
            bench_model(bed, name, model, rates, sides, args, work, results)
    print(f"\nrows in {work / 'results.jsonl'}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
