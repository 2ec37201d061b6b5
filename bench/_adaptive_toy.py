"""The model study of bench/adaptive_batch.py (`--toy`): the batch policies' own decisions on
exact gradients, in modelled time.

SGD on a noisy, ill-conditioned least-squares problem (numpy): each side (fixed batches, and
jabas, pollux and shoal through the same `decide` call as a live run) trains until the excess
loss is at most the target; a step costs a modelled 20 ms + 0.1 ms per sample. Seconds on one
core; no shoal run, no torch.
"""

from __future__ import annotations

import math
import statistics


def fmt_spread(stat: dict | None, digits: int = 1) -> str:
    """An aggregate's 'mean [min..max]' ('-' for none)."""
    if stat is None:
        return "-"
    mean, low, high = (f"{stat[k]:.{digits}f}" for k in ("mean", "min", "max"))
    return f"{mean} [{low}..{high}]"


TOY_DIM, TOY_SAMPLES, TOY_NOISE = 10, 50_000, 1.0
TOY_B, TOY_B0, TOY_BMAX = 8, 16, 2048  # micro-batch, initial and largest global batch
TOY_OVERHEAD_S, TOY_SAMPLE_S = 0.02, 1e-4  # modelled step: 20 ms + 0.1 ms per sample
TOY_LR = 0.05  # SGD learning rate at B0
TOY_SCALING = {"jabas": "sqrt", "pollux": "adascale", "shoal": "adascale"}


def toy_run(side: str, seed: int, target: float, every: int, max_steps: int = 20_000) -> dict:
    """SGD on a noisy, ill-conditioned least-squares problem (numpy; gradients exact per
    micro-batch, as the runtime measures them) until the excess loss is <= `target`; the batch
    follows the side's policy through the same `decide` call as a live run."""
    import numpy as np

    from shoal.control.batch_policy import make_policy
    from shoal.control.batch_policy_base import BatchContext, needs_similarity
    from shoal.control.gradstats import StepStats

    rng = np.random.default_rng(seed)
    curvature = np.logspace(0, -2, TOY_DIM)  # eigenvalues 1 .. 0.01 of E[x x^T]
    x = rng.standard_normal((TOY_SAMPLES, TOY_DIM)) * np.sqrt(curvature)
    w_star = rng.standard_normal(TOY_DIM)
    y = x @ w_star + TOY_NOISE * rng.standard_normal(TOY_SAMPLES)
    ctx = BatchContext(
        TOY_B,
        (TOY_B0, TOY_BMAX),
        None,
        lambda batch: batch / (TOY_OVERHEAD_S + TOY_SAMPLE_S * batch),
        TOY_B0,
    )
    policy, batch = None, TOY_B0
    if side.startswith("fixed-"):
        batch = int(side.split("-")[1])
    else:
        policy = make_policy(
            side, micro_batch_size=TOY_B, bounds=(TOY_B0, TOY_BMAX), every=every,
            lr_scaling=TOY_SCALING[side],
        )  # fmt: skip
    w, seconds, samples, order, pos = np.zeros(TOY_DIM), 0.0, 0, rng.permutation(TOY_SAMPLES), 0
    for step in range(max_steps):
        m = batch // TOY_B
        if pos + batch > TOY_SAMPLES:
            order, pos = rng.permutation(TOY_SAMPLES), 0
        idx, pos = order[pos : pos + batch], pos + batch
        residual = x[idx] @ w - y[idx]
        per_micro = (residual[:, None] * x[idx]).reshape(m, TOY_B, TOY_DIM).mean(axis=1)
        grad = per_micro.mean(axis=0)
        factor = policy.lr_factor(batch, ctx) if policy else math.sqrt(batch / TOY_B0)
        w -= TOY_LR * factor * grad
        seconds += TOY_OVERHEAD_S + TOY_SAMPLE_S * batch
        samples += batch
        if 0.5 * float(((w - w_star) ** 2 * curvature).sum()) <= target:
            return {"steps": step + 1, "samples": samples, "model_s": seconds, "last": batch}
        if policy is not None:
            similarity = None
            if needs_similarity(policy, step) and m >= 2:
                h1, h2 = per_micro[: m // 2].sum(0), per_micro[m // 2 :].sum(0)
                similarity = float(h1 @ h2 / math.sqrt((h1 @ h1) * (h2 @ h2)))
            sqnorms = tuple(float(v) for v in (per_micro**2).sum(axis=1))
            stats = StepStats(step, TOY_B, m, sqnorms, float(grad @ grad), similarity, 0.0)
            batch = policy.decide(stats, ctx)
    return {"steps": None, "samples": samples, "model_s": seconds, "last": batch}


def toy_study(seeds: list[int], target: float, every: int) -> dict:
    sides = [f"fixed-{b}" for b in (16, 64, 256, 1024)] + list(TOY_SCALING)
    out = {}
    for side in sides:
        runs = [toy_run(side, seed, target, every) for seed in seeds]
        done = [r for r in runs if r["steps"] is not None]
        out[side] = {
            "reached": f"{len(done)}/{len(runs)}",
            **{
                key: {
                    "mean": statistics.mean(r[key] for r in done),
                    "median": statistics.median(r[key] for r in done),
                    "min": min(r[key] for r in done),
                    "max": max(r[key] for r in done),
                }
                if done
                else None
                for key in ("steps", "samples", "model_s")
            },
            "runs": runs,
        }
    return out


def toy_table(sides: dict) -> str:
    lines = ["| side | reached | steps | samples | modelled s | median modelled s |"]
    lines.append("|---|---|---|---|---|---|")
    for side, agg in sides.items():
        cells = [
            fmt_spread(agg["steps"], 0),
            fmt_spread(agg["samples"], 0),
            fmt_spread(agg["model_s"]),
        ]
        cells.append(f"{agg['model_s']['median']:.1f}" if agg["model_s"] else "-")
        lines.append(f"| {side} | {agg['reached']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
