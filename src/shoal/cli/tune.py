"""`shoal tune`: search schedule knobs for the fastest configuration under a memory cap.

Argument parsing, input validation and printing only; the search is
`shoal.tune.tune`, which measures every configuration in its own subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from typing import Any

from shoal.cli.flags import ascii_float, ascii_int, nonempty_path
from shoal.digits import ascii_digits
from shoal.errors import UserError

_MODELS = ("gpt2", "bert", "llama", "wideresnet")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="autotune micro-batch size, checkpointed fraction and fusion under a memory cap",
        description="Measure schedule configurations of a library model in subprocesses (real "
        "throughput and peak memory) and report the fastest one whose peak memory fits the cap. "
        "Optuna proposes the configurations.",
    )
    p.add_argument("--model", choices=_MODELS, default="gpt2", help="library model to tune")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model config override, repeatable (e.g. --config n_layer=4)",
    )
    p.add_argument(
        "--memory-cap-mb",
        type=ascii_float,
        required=True,
        help="peak memory cap per process in MiB (resident set size on CPU, max allocated on CUDA)",
    )
    p.add_argument("--trials", type=ascii_int, default=12, help="trial budget (default 12)")
    p.add_argument("--batch-sizes", default="1,2,4,8", help="micro-batch sizes to try")
    p.add_argument("--ckpt-ratios", default="0,0.5,1", help="checkpointed fractions to try")
    p.add_argument("--fusion", default="off,on", help="fusion settings to try: off, on, or off,on")
    p.add_argument(
        "--seq-len", type=ascii_int, default=64, help="tokens per sample (image side: CNN)"
    )
    p.add_argument("--steps", type=ascii_int, default=3, help="timed training steps per trial")
    p.add_argument("--warmup-steps", type=ascii_int, default=1, help="untimed steps per trial")
    p.add_argument(
        "--world-size",
        type=ascii_int,
        default=1,
        help="tensor-parallel processes (gloo; at most 8 per CPU core, 16 at least)",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where trials run")
    p.add_argument(
        "--threads", type=ascii_int, default=0, help="torch threads per process (0: auto)"
    )
    p.add_argument(
        "--timeout-s", type=ascii_float, default=600.0, help="wall-clock limit per trial"
    )
    p.add_argument(
        "--objective",
        choices=("throughput", "cpu"),
        default="throughput",
        help="maximize samples/s (default) or samples per CPU second (steadier on a busy machine)",
    )
    p.add_argument("--seed", type=ascii_int, default=0, help="seed of the sampler and the model")
    p.add_argument(
        "--out", type=nonempty_path, default=None, help="write every trial to this JSON file"
    )
    p.set_defaults(func=_tune)


def _csv(text: str, parse: Any, flag: str) -> tuple:
    try:
        values = tuple(parse(v.strip()) for v in ascii_digits(text).split(",") if v.strip())
    except ValueError as exc:
        raise UserError(f"{flag}: cannot parse {text!r} ({exc})") from None
    if not values:
        raise UserError(f"{flag}: needs at least one value")
    return values


def _on_off(text: str) -> bool:
    if text in ("on", "true", "1"):
        return True
    if text in ("off", "false", "0"):
        return False
    raise ValueError(f"{text!r} is not on/off")


def _config_value(text: str) -> Any:
    from shoal.json_input import loads

    try:
        return loads(text, finite=True)  # ints, floats (1e400 refused), true/false
    except json.JSONDecodeError:
        return text


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["n_layer=4", "dropout=0.1"]` -> `{"n_layer": 4, "dropout": 0.1}`."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--config: expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = _config_value(value.strip())
        except ValueError as exc:  # nested too deeply (a traceback), thousands of digits
            shown = item if len(item) <= 60 else f"{item[:57]}..."
            raise UserError(f"--config {shown}: {exc}") from None
    return out


# TrialSpec's fields whose bounds it checks itself, by the flag that sets each
_TRIAL_FLAGS = {
    "steps": "--steps",
    "warmup_steps": "--warmup-steps",
    "world_size": "--world-size",
    "seq_len": "--seq-len",
    "threads": "--threads",
}


def _check_trial_flags(args: argparse.Namespace, overrides: dict[str, Any]) -> None:
    """What every trial shares, refused by its flag: a wrong value would fail each trial, and
    the search would end in "nothing fits" instead of naming the input."""
    from shoal.launcher.spec import local_worker_limit
    from shoal.models import get_model_entry

    try:
        get_model_entry(args.model).make_config(**overrides)
    except ValueError as exc:
        raise UserError(f"--config {' '.join(args.config)}: {exc}") from None
    if not 0 <= args.seed < 2**32:  # the range of the sampler's (numpy's) seed
        raise UserError(f"--seed must be in [0, 2**32 - 1], got {args.seed}")
    limit = local_worker_limit()
    if args.threads > limit:  # torch's pool fails past a few thousand: a crash
        cores = len(os.sched_getaffinity(0))
        raise UserError(
            f"--threads {args.threads}: at most {limit} threads per process on {cores} CPU cores"
        )


def _tune(args: argparse.Namespace) -> int:
    import optuna

    from shoal.launcher.spec import check_local_processes
    from shoal.tune import SearchSpace, TrialSpec, run_trial, tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is printed below

    overrides = parse_overrides(args.config)
    _check_trial_flags(args, overrides)
    try:
        space = SearchSpace(
            micro_batch_sizes=_csv(args.batch_sizes, int, "--batch-sizes"),
            ckpt_ratios=_csv(args.ckpt_ratios, float, "--ckpt-ratios"),
            fusion=_csv(args.fusion, _on_off, "--fusion"),
        )
        base = TrialSpec(
            model=args.model,
            model_config=overrides,
            seq_len=args.seq_len,
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            world_size=args.world_size,
            device=args.device,
            threads=args.threads,
            seed=args.seed,
        )
    except ValueError as exc:  # TrialSpec names its field: the user gave a flag
        field, _, rest = str(exc).partition(" ")
        flag = _TRIAL_FLAGS.get(field)
        raise UserError(f"{flag} {rest}" if flag else str(exc)) from None
    if not args.timeout_s > 0:  # `not >` also refuses NaN
        raise UserError(f"--timeout-s must be > 0, got {args.timeout_s}")
    check_local_processes("--world-size", args.world_size)  # each trial forks them at once
    if args.out is not None:  # checked before the trials, not after them
        if args.out.is_dir():
            raise UserError(f"--out {args.out}: is a directory (give a JSON file's path)")
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot write to --out {str(args.out)!r}: {exc.strerror}") from None

    def measure(spec: TrialSpec, cap: float):
        return run_trial(spec, memory_cap_mb=cap, timeout_s=args.timeout_s)

    def show(rec) -> None:
        speed = f"{rec.samples_per_s:9.2f} samples/s" if rec.samples_per_s else " " * 19
        peak = f"peak {rec.peak_memory_mb:7.0f} MiB" if rec.peak_memory_mb else ""
        print(
            f"trial {rec.number:3d}: mbs={rec.micro_batch_size:<4d} ckpt={rec.ckpt_ratio:<5.2f} "
            f"fusion={'on ' if rec.fusion else 'off'} {rec.status:9s}{speed} {peak} {rec.detail}",
            flush=True,
        )

    result = tune(
        base,
        space,
        args.memory_cap_mb,
        args.trials,
        seed=args.seed,
        objective=args.objective,
        measure=measure,
        on_trial=show,
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(result.to_json())
    best = result.best
    if best is None:  # why: over the cap is an answer, timeouts and errors are not
        counts = Counter(rec.status for rec in result.trials)
        why = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        print(f"no configuration fits under {args.memory_cap_mb:.0f} MiB ({why})")
        return 1
    print(
        f"best: micro_batch_size={best.micro_batch_size} ckpt_ratio={best.ckpt_ratio} "
        f"fusion={'on' if best.fusion else 'off'}: {best.samples_per_s:.2f} samples/s, "
        f"peak {best.peak_memory_mb:.0f} MiB (cap {args.memory_cap_mb:.0f} MiB)"
    )
    return 0
