"""A live `--provider` run's model of itself: what its scaler weighs and what its replay loads.

Both are made of the same numbers, so that `shoal simulate --scenario` replays what the live
scaler saw:
- the run's own measurements so far (`measured.py`: host speed, step overhead, change cost,
  join delay, the global batch), through the shared step-time model;
- the provider (`shoal.cluster.provider`): at each decision its offers, each at the start-up
  the run measured, and each spot kind's revocation rate from the provider's own model;
  in the scenario, its configuration (kinds, seed, lifetimes or trace, notice, quota,
  outages, time scale);
- the lease book (`leases.py`): the mix held and the spend, at each decision;
- the run's configuration: its steps, goal, `--max-servers`, `--scale-every`, initial
  `--workers` servers, `--recovery`, and the durable checkpoints' cadence in emulated seconds.

`RunModel.scaler_input` is the scaler's input at each decision (`autoscale.Driver`); the
scenario is written to `OUT/scenario.json` at the end.
"""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import replace

from shoal.cluster.provider import EmulatedProvider
from shoal.control.mix_model import ScalerInput, boot_left, revocation_rate
from shoal.launcher.leases import LeaseBook
from shoal.launcher.measured import Measurements
from shoal.sim.scenario import Scenario, join_delay_at, kind_slowdowns

DEFAULT_CHECKPOINT_EVERY_S = 600.0  # the replay's default, when the run says nothing


class RunModel:
    """The scaler's input and the replay's scenario of one run (see the module's docstring).
    `initial` is the --workers servers, (kind, tier) -> count."""

    def __init__(
        self,
        spec,
        speeds,
        provider: EmulatedProvider,
        measured: Measurements,
        book: LeaseBook,
        initial: Mapping[tuple[str, str], int],
    ) -> None:
        self.spec, self.speeds, self.cfg = spec, speeds, spec.config.provider
        self.provider, self.measured, self.book = provider, measured, book
        self.initial = dict(initial)
        self._rates: dict[str, float] = {}

    def revocation_rate(self, kind: str) -> float:
        """Expected revocations per emulated second of a spot server of `kind` (cached)."""
        if kind not in self._rates:  # the provider's own model: a Bamboo trace is any kind's
            self._rates[kind] = revocation_rate(self.provider.model(kind), kind)
        return self._rates[kind]

    def scaler_input(
        self, now: float, steps_done: int, booting: Collection[str] = ()
    ) -> ScalerInput:
        """What the scaler weighs now: the scenario's numbers as measured so far (the same
        step-time model `shoal simulate --scenario` replays, without re-reading the provider's
        lifetimes on every decision). `booting`: the held servers whose workers have not joined."""
        m = self.measured
        startup_s = m.startup_s()
        boots = [self.book.leases[s] for s in booting]
        return ScalerInput(
            now_s=now,
            steps_done=steps_done,
            steps_total=self.spec.config.steps,
            batch=tuple(m.batch),
            step_time=m.step_time(kind_slowdowns(self.speeds.slowdown, self.provider.kinds)),
            offers=[replace(o, startup_s=startup_s) for o in self.provider.offers(now)],
            held=self.book.held(),
            spent_usd=self.book.spent(now),
            change_cost_s=m.change_cost_s(),
            revocations_per_s=self.revocation_rate,
            booting=Counter((lease.kind, lease.tier) for lease in boots),
            boot_left_s=boot_left([lease.requested_s for lease in boots], startup_s, now),
        )

    def scenario(self, steps_done: int, trained_s: float | None) -> Scenario:
        """The run for `shoal simulate --scenario`, after `steps_done` steps in `trained_s`
        emulated seconds of this attempt (None: no step line yet)."""
        cfg, m = self.cfg, self.measured
        goal = {"deadline_s": cfg.deadline_s} if cfg.deadline else {"budget_usd": cfg.budget_usd}
        provider = {
            "kinds": list(cfg.kind_list), "seed": cfg.seed, "spot_lifetimes": cfg.spot_lifetimes,
            "spot_trace": cfg.spot_trace and str(pathlib.Path(cfg.spot_trace).resolve()),
            "startup_s": cfg.startup_s, "notice_s": cfg.notice_s,
            "quota": [[k, t, n] for (k, t), n in sorted(cfg.quota_map.items())],
            "outages": [list(o) for o in cfg.outage_list], "time_scale": cfg.time_scale,
        }  # fmt: skip
        return Scenario(
            steps=self.spec.config.steps,
            micro_batch_size=m.micro_batch_size,
            batch=tuple(m.batch),
            host_s=m.host_s(),
            slowdowns={k: self.speeds.slowdown[k] for k in sorted(self.speeds.slowdown)},
            step_overhead_s=m.overhead_s(),
            change_cost_s=m.change_cost_s(),
            provider=provider,
            goal=goal if cfg.autoscale else {},
            max_servers=cfg.max_servers,
            scale_every_s=cfg.scale_every_s,
            autoscale=cfg.autoscale,
            initial={f"{k}:{t}": n for (k, t), n in sorted(self.initial.items())},
            initial_ready=True,  # the --workers servers are ready when the clock starts
            join_delay_s=join_delay_at(m.joins),
            join_delays=tuple(m.joins),
            checkpoint_every_s=self.checkpoint_every_s(steps_done, trained_s),
            restart_from_checkpoint=cfg.recovery == "restart",
        )

    def checkpoint_every_s(self, steps_done: int, trained_s: float | None) -> float:
        """The durable checkpoints' cadence in emulated seconds: --checkpoint-seconds (wall)
        times the time scale, or --checkpoint-every steps at the run's mean step, whichever is
        sooner (the replay's default, 600 s, when neither says: no step trained yet)."""
        ck = self.spec.config.checkpoint
        every = [ck.seconds * self.cfg.time_scale] if ck.seconds else []
        if ck.every and steps_done and trained_s is not None and trained_s > 0:
            every.append(ck.every * trained_s / steps_done)
        return min((e for e in every if e > 0), default=DEFAULT_CHECKPOINT_EVERY_S)
