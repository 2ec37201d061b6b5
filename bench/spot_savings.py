"""Spot savings, live on the emulated provider: shoal's scaler vs all on-demand vs restart.

    python bench/spot_savings.py [--seeds 0,1,2,3,4] [--sides scaler,on-demand,restart] [--smoke]

Job: examples/digits.py, micro_batch_size=16, global_batch_size=128 (8 micro-batches), a fixed
number of steps (--steps, default 60), exact mode. Every run buys its servers from the
emulated provider (`--provider local`), `SHOAL_EMULATED_HOST_S` fixed (a v100 micro-batch
takes --host-s wall seconds whatever the host's load) and a time scale (--time-scale emulated
seconds per wall second, default 80). Seeds are `--provider-seed`s.

The time scale and the boot (why 80 and 300 s). A server's boot is `--startup`, default 300 s:
the measured one. The ICAC'19 transient-server data put VM up-time at 230-350 s beyond the
training it ran (`../shared/research/transient_spot.md`, §1, the cost model), Bamboo's
simulator (whose g4dn lifetimes are replayed here) uses 45 s to create a spot server. (The
earlier default, 1200 s, was an arbitrary choice; `--startup 1200` stays as the sensitivity
value.) What the emulation adds to it is a wall-clock cost that the time scale multiplies: a
replacement worker's process start-up (importing torch: about 3.4 wall s on the quiet 2-core
VM) overlaps its boot but cannot end before it. At the old scale of 360 that was 20 emulated
minutes per boot whatever --startup said; at 80 it is about 270 s, inside a 300 s boot.
--host-s 0.9 keeps the emulated job of the earlier scenario (a v100 micro-batch of 72
emulated s). The price: the emulated hours take 4.5x more wall time (a scaler run about 7
minutes, the full bench about 100 minutes alone on 2 cores). A membership change costs the
regroup, 0.02-0.07 wall s (the prior's --change-s 0.05; the live runs measure their own).

The scenario (the defaults): spot lifetimes from Bamboo's measured AWS g4dn trace
(`--lifetimes g4dn`, shipped in `shoal/data/preemption/bamboo`: a node's median life is about
an hour, a tenth of them outlive 6.5 h) for every kind, a 300 s boot (`--startup 300`), a
30 s notice, a 10 h deadline for 60 steps. Revocations are frequent there (the shipped GCE
lifetimes, `--lifetimes gce`, revoke a server within 24 h one time in five: a 150-step run over
28 h met one revocation in five seeds). The simulator on the prior profile, seeds 0-4 (each
side's initial servers ready at the start, as live; 2026-11-25, `bench/spot_prior.py`):
the scaler starts on 4 P100 spot (the fastest of the mixes
within NEAR_BEST of the cheapest), meets 27 revocations and saves 57.5 % against 2 P100
on-demand (51.0 % at --startup 1200); restart, on 2 P100 spot, meets 66.

Sides, per seed:
- `scaler`: `--autoscale --deadline D --kinds k80,p100,v100`. Its initial `--workers` are the
  scaler's own first choice on the bench's prior profile (below), so the live run does not
  start by waiting on the boot of the servers it wants;
- `on-demand`: the scaler's own cheapest all-on-demand mix that meets D (every spot quota 0),
  decided on the same prior profile with the near-tie margin off (`NEAR_BEST` 0: the strictly
  cheapest, not the fastest of the near-cheapest, which would flatter the savings), run as a
  fixed `--workers` mix on the provider. Savings = 1 - mean scaler cost / mean on-demand cost
  over the seeds, both meeting the same deadline D;
- `restart`: SkyPilot's managed spot, live (`--recovery restart`): the cheapest mix that meets
  D held (the scaler's choice with the near-tie margin off: a managed spot job is sized once,
  and the scaler's own first mix, the fastest of the near-cheapest, can be twice as many
  servers, each revocation of which restarts the whole job), the same provider seed and kinds
  as the scaler run's (a server's lifetime is keyed by its kind and slot: the first servers of
  a kind meet the same revocations in both runs), and at ANY revocation every worker is
  stopped, every server given back, the mix leased again (each new server pays --startup)
  and the job continues from the newest durable checkpoint. Checkpoints every
  --checkpoint-every steps (default 12, about an emulated hour at the prior's step time on 2
  P100s) on every provider side; only restart and a scaler run that loses every server at
  once ever read one.
Plus one plain fixed run (no provider) of the same steps: the reference `state_sha256`.

Per live run: emulated time (the last cost line's `t_s`), cost (`result.json` `cost.usd`),
revocations, steps lost per revocation (the `recover` lines' `lost_steps`: the in-flight step
for the scaler, the steps since the checkpoint and the one in flight for restart), the digest
and its check. For each scaler run, `shoal simulate --scenario OUT/scenario.json --json` gives the
prediction; the row has both and the relative errors. Prints one JSON object per row, a summary
object, then a table.

The prior profile (seconds are wall seconds, times --time-scale in the scenario): a v100
micro-batch of --host-s, a per-step overhead of --overhead-s, a membership change of
--change-s. The live runs measure their own; only the initial mixes come from the prior.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import _args  # noqa: E402

import shoal.control.scaler as scaler_mod  # noqa: E402
from shoal.cluster.provider import load_spot_trace, parse_spot_lifetimes  # noqa: E402
from shoal.config.provider import ProviderConfig  # noqa: E402
from shoal.errors import UserError  # noqa: E402
from shoal.sim.replay import simulate  # noqa: E402
from shoal.sim.scenario import Scenario  # noqa: E402

JOB = "examples/digits.py"
OPTIONS = ["-o", "micro_batch_size=16", "-o", "global_batch_size=128"]
KINDS = ("k80", "p100", "v100")
SIDES = ("scaler", "on-demand", "restart")
TIMEOUT_S = 1800.0  # a restart run of 14 emulated hours takes about 11 wall minutes at 80


def check_args(p: argparse.ArgumentParser, args) -> None:
    """Every value a run would refuse, refused before the fixed run starts: the provider flags
    as `shoal run` checks them, the lifetime model or trace, the prior's seconds."""
    if args.steps < 1:
        p.error(f"--steps must be at least 1, not {args.steps}")
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be at least 0, not {args.checkpoint_every}")
    if not 0 < args.host_s < math.inf:
        p.error(f"--host-s must be a number of seconds above 0, not {args.host_s}")
    for flag, value in (("--overhead-s", args.overhead_s), ("--change-s", args.change_s)):
        if not 0 <= value < math.inf:
            p.error(f"{flag} must be a number of seconds, at least 0, not {value}")
    _args.check_out_dir(p, "--out", args.out)
    if args.spot_trace is not None and not args.spot_trace.strip():
        p.error("--spot-trace: no file given")
    try:
        ProviderConfig(
            name="local", autoscale=True, deadline=args.deadline, kinds=",".join(KINDS),
            time_scale=args.time_scale, max_servers=args.max_servers, startup_s=args.startup,
            notice=args.notice, spot_trace=args.spot_trace,
        )  # fmt: skip
        if args.spot_trace:
            load_spot_trace(args.spot_trace)
    except UserError as exc:
        p.error(str(exc))
    if not args.spot_trace:
        if not args.lifetimes.strip():
            p.error("--lifetimes: no lifetime model given")
        try:  # as the provider reads them (provider_flags)
            parse_spot_lifetimes(",".join(f"{k}:{args.lifetimes}" for k in KINDS))
        except UserError as exc:
            p.error(f"--lifetimes: {exc}")


def parse_args(argv: list[str] | None = None, doc: str = __doc__) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=doc.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--seeds", type=_args.seeds, default="0,1,2,3,4", help="provider seeds, comma-separated"
    )
    p.add_argument("--sides", default=",".join(SIDES), help="comma list of the sides to run")
    p.add_argument("--steps", type=int, default=60, help="steps per run")
    p.add_argument("--deadline", default="10h", help="the goal of the scaler (emulated)")
    p.add_argument("--time-scale", type=float, default=80.0, help="emulated s per wall s")
    p.add_argument("--host-s", type=float, default=0.9, help="wall s per v100 micro-batch")
    p.add_argument("--overhead-s", type=float, default=0.04, help="prior: wall s per step")
    p.add_argument("--change-s", type=float, default=0.05, help="prior: wall s per change")
    p.add_argument("--startup", type=float, default=300.0, help="emulated boot s (ICAC'19)")
    p.add_argument("--notice", default="30", help="emulated seconds of notice, or none")
    p.add_argument("--lifetimes", default="g4dn", help="lifetime model of every kind")
    p.add_argument("--spot-trace", default=None, help="a spot trace instead of --lifetimes")
    p.add_argument("--max-servers", type=int, default=4, help="bounds the processes started")
    p.add_argument("--checkpoint-every", type=int, default=12, help="steps (provider sides)")
    p.add_argument("--out", default=None, help="where the runs go (None: a temp dir)")
    p.add_argument("--no-fixed", action="store_true", help="skip the plain fixed run (no check)")
    p.add_argument("--smoke", action="store_true", help="1 seed, 8 fast steps, a 2 h deadline")
    args = p.parse_args(argv)
    if args.smoke:
        args.seeds, args.steps, args.deadline, args.host_s = [0], 8, "2h", 0.05
        args.time_scale = 360.0  # the plumbing only: fast, not the faithful scale
        args.checkpoint_every = 2
    args.seed_list = args.seeds
    args.side_list = [s.strip() for s in args.sides.split(",") if s.strip()]
    bad = sorted(set(args.side_list) - set(SIDES))
    if bad:
        p.error(f"unknown side {bad[0]!r} (one of {', '.join(SIDES)})")
    if not args.side_list:
        p.error(f"--sides: no side in {args.sides!r} (one of {', '.join(SIDES)})")
    check_args(p, args)
    return args


def deadline_s(text: str) -> float:
    from shoal.config.provider import parse_duration

    return parse_duration(text, "--deadline")


# -- the prior profile and the mixes decided on it -----------------------------------------------
def provider_json(args, seed: int, quota=None) -> dict:
    lifetimes = None if args.spot_trace else ",".join(f"{k}:{args.lifetimes}" for k in KINDS)
    notice = None if args.notice.lower() == "none" else float(args.notice)
    return {
        "kinds": ",".join(KINDS), "seed": seed, "startup_s": args.startup, "notice_s": notice,
        "spot_lifetimes": lifetimes, "spot_trace": args.spot_trace, "quota": quota,
    }  # fmt: skip


def prior_scenario(args, seed: int, quota=None) -> Scenario:
    scale = args.time_scale
    return Scenario(
        steps=args.steps, micro_batch_size=16, batch=((0, 128),), host_s=args.host_s * scale,
        slowdowns={}, step_overhead_s=args.overhead_s * scale,
        change_cost_s=args.change_s * scale, provider=provider_json(args, seed, quota),
        goal={"deadline_s": deadline_s(args.deadline)}, max_servers=args.max_servers,
        scale_every_s=600.0, autoscale=True, initial={},
    )  # fmt: skip


def decided_mix(result) -> dict[str, int]:
    """A replay's first decision: {"kind:tier": servers}."""
    decide = next(e for e in result.events if e["event"] == "decide")
    return {key: int(n) for n, key in (item.split(" ") for item in decide["mix"].split(", "))}


def first_mix(sc: Scenario) -> dict[str, int]:
    """The scaler's first decision on a scenario: {"kind:tier": servers}."""
    return decided_mix(simulate(sc))


def cheapest_first_mix(sc: Scenario) -> dict[str, int]:
    """`first_mix` with the scaler's near-tie margin off: the strictly cheapest mix meeting
    the goal (the on-demand baseline: the best all-on-demand can do at the deadline)."""
    saved = scaler_mod.NEAR_BEST
    scaler_mod.NEAR_BEST = 0.0
    try:
        return first_mix(sc)
    finally:
        scaler_mod.NEAR_BEST = saved


def workers_flag(mix: dict[str, int]) -> str:
    return ",".join(f"{n}x{key}" for key, n in sorted(mix.items()) if n)


# -- live runs ------------------------------------------------------------------------------------
def shoal(args, argv: list[str], out: pathlib.Path, env_host: bool = True) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    if env_host:
        env["SHOAL_EMULATED_HOST_S"] = repr(args.host_s)
    cmd = [sys.executable, "-m", "shoal", "run", JOB, *OPTIONS, "--steps", str(args.steps)]
    cmd += ["--out", str(out), *argv]
    start = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    result = json.loads((out / "result.json").read_text())
    result["bench_wall_s"] = time.time() - start
    return result


def provider_flags(args, seed: int) -> list[str]:
    flags = ["--provider", "local", "--kinds", ",".join(KINDS), "--provider-seed", str(seed)]
    flags += ["--time-scale", str(args.time_scale), "--startup", str(args.startup)]
    flags += ["--notice", args.notice, "--max-servers", str(args.max_servers)]
    flags += ["--checkpoint-every", str(args.checkpoint_every)]
    if args.spot_trace:
        return [*flags, "--spot-trace", args.spot_trace]
    return [*flags, "--spot-lifetimes", ",".join(f"{k}:{args.lifetimes}" for k in KINDS)]


def read_jsonl(path: pathlib.Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]


def live_row(side: str, seed: int, out: pathlib.Path, result: dict, ref: str | None) -> dict:
    rows = read_jsonl(out / "metrics.jsonl")
    costs = [r for r in rows if r["kind"] == "cost"]
    recovers = [r for r in rows if r["kind"] == "membership" and r["event"] == "recover"]
    lost = sum(r.get("lost_steps") or 0 for r in recovers)
    revocations = result["cost"]["revocations"]
    # a restart's revocation of a server still booting stops nothing: lost work per restart too
    restarts = sum((r.get("detail") or "").startswith("restart") for r in recovers)
    return {
        "side": side, "seed": seed, "live": True,
        "time_s": costs[-1]["t_s"], "cost_usd": result["cost"]["usd"],
        "revocations": revocations, "lost_steps": lost,
        "lost_steps_per_revocation": lost / revocations if revocations else None,
        "restarts": restarts, "lost_steps_per_restart": lost / restarts if restarts else None,
        "workers": sorted({r["worker"] for r in rows if r["kind"] == "lease" and r["worker"]}),
        "state_sha256": result["state_sha256"],
        "same_state_as_fixed_run": None if ref is None else result["state_sha256"] == ref,
        "wall_s": round(result["bench_wall_s"], 1), "out": str(out),
    }  # fmt: skip


def simulated(out: pathlib.Path) -> dict:
    """`shoal simulate --scenario OUT/scenario.json --json`, as a user runs it."""
    cmd = [sys.executable, "-m", "shoal", "simulate", "--scenario", str(out / "scenario.json")]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([*cmd, "--json"], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def with_prediction(row: dict, out: pathlib.Path) -> dict:
    sim = simulated(out)
    row["sim_time_s"], row["sim_cost_usd"] = sim["time_s"], sim["cost_usd"]
    row["sim_revocations"] = sim["revocations"]
    row["time_rel_err"] = sim["time_s"] / row["time_s"] - 1 if row["time_s"] else None
    row["cost_rel_err"] = sim["cost_usd"] / row["cost_usd"] - 1 if row["cost_usd"] else None
    return row


# -- the bench ------------------------------------------------------------------------------------
def run_seed(args, seed: int, base: pathlib.Path, ref: str | None) -> list[dict]:
    rows = []
    spot_mix = first_mix(prior_scenario(args, seed))
    scaler_out = base / f"seed{seed}" / "scaler"
    if "scaler" in args.side_list:
        flags = ["--workers", workers_flag(spot_mix), *provider_flags(args, seed)]
        flags += ["--autoscale", "--deadline", args.deadline]
        result = shoal(args, flags, scaler_out)
        row = live_row("scaler", seed, scaler_out, result, ref)
        row["initial"] = spot_mix
        rows.append(with_prediction(row, scaler_out))
    if "on-demand" in args.side_list:
        no_spot = {f"{k}:spot": 0 for k in KINDS}
        mix = cheapest_first_mix(prior_scenario(args, seed, quota=no_spot))
        out = base / f"seed{seed}" / "on-demand"
        flags = ["--workers", workers_flag(mix), *provider_flags(args, seed)]
        row = live_row("on-demand", seed, out, shoal(args, flags, out), ref)
        row["mix"] = mix
        rows.append(row)
    if "restart" in args.side_list:
        out = base / f"seed{seed}" / "restart"
        held = cheapest_first_mix(prior_scenario(args, seed))
        flags = ["--workers", workers_flag(held), *provider_flags(args, seed)]
        result = shoal(args, [*flags, "--recovery", "restart"], out)
        row = live_row("restart", seed, out, result, ref)
        row["mix"] = held
        rows.append(row)
    return rows


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def summarise(args, rows: list[dict], ref: str | None) -> dict:
    by = {side: [r for r in rows if r["side"] == side] for side in SIDES}
    scaler, od, restart = by["scaler"], by["on-demand"], by["restart"]
    od_cost, sc_cost = mean(r["cost_usd"] for r in od), mean(r["cost_usd"] for r in scaler)
    sc_rev = sum(r["revocations"] for r in scaler)
    rs_rev = sum(r["revocations"] for r in restart)
    return {
        "bench": "spot_savings", "seeds": args.seed_list, "steps": args.steps,
        "deadline_s": deadline_s(args.deadline), "time_scale": args.time_scale,
        "fixed_run_state_sha256": ref,
        "all_same_state": None if ref is None else all(
            r["same_state_as_fixed_run"] for r in scaler + od + restart
        ),
        "savings_vs_on_demand": 1 - sc_cost / od_cost if sc_cost and od_cost else None,
        "scaler_met_deadline": sum(r["time_s"] <= deadline_s(args.deadline) for r in scaler),
        "scaler_revocations": sc_rev,
        "scaler_lost_steps_per_revocation":
            sum(r["lost_steps"] for r in scaler) / sc_rev if sc_rev else None,
        "restart_revocations": rs_rev,
        "restart_lost_steps_per_revocation":
            sum(r["lost_steps"] for r in restart) / rs_rev if rs_rev else None,
        "restart_restarts": sum(r["restarts"] for r in restart),
        "restart_lost_steps_per_restart": sum(r["lost_steps"] for r in restart)
        / max(1, sum(r["restarts"] for r in restart)) if restart else None,
        "restart_met_deadline": sum(r["time_s"] <= deadline_s(args.deadline) for r in restart),
        "restart_cost_vs_scaler": mean(r["cost_usd"] for r in restart) / sc_cost
        if restart and sc_cost else None,
        "time_rel_err_max": max((abs(r["time_rel_err"]) for r in scaler), default=None),
        "cost_rel_err_max": max((abs(r["cost_rel_err"]) for r in scaler), default=None),
        "within_10_percent": sum(
            abs(r["time_rel_err"]) <= 0.1 and abs(r["cost_rel_err"]) <= 0.1 for r in scaler
        ),
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    head = "| side | seed | time (h) | cost (USD) | revocations | lost steps / rev | sim time (h) "
    head += "| sim cost | err time | err cost | same state |\n|" + "---|" * 11
    out = [head]
    for r in rows:

        def f(k: str, fmt: str, r: dict = r) -> str:
            return "-" if r.get(k) is None else format(r[k], fmt)

        out.append(
            f"| {r['side']} | {r['seed']} | {r['time_s'] / 3600:.2f} | {r['cost_usd']:.2f} "
            f"| {r['revocations']} | {f('lost_steps_per_revocation', '.2f')} "
            f"| {'-' if r.get('sim_time_s') is None else format(r['sim_time_s'] / 3600, '.2f')} "
            f"| {f('sim_cost_usd', '.2f')} | {f('time_rel_err', '+.1%')} "
            f"| {f('cost_rel_err', '+.1%')} | {f('same_state_as_fixed_run', '')} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = pathlib.Path(args.out or tempfile.mkdtemp(prefix="shoal-spot-"))
    ref = None
    if not args.no_fixed:
        plain = shoal(args, ["--workers", "v100"], base / "fixed", env_host=False)
        ref = plain["state_sha256"]
        print(json.dumps({"side": "fixed", "state_sha256": ref}), flush=True)
    rows = []
    for seed in args.seed_list:
        for row in run_seed(args, seed, base, ref):
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(json.dumps(summarise(args, rows, ref)), flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
