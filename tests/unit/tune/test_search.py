"""The knob search, driven by a synthetic measurement so that the optimum is known."""

import optuna
import pytest

from shoal.tune import SearchSpace, TrialOutcome, TrialSpec, tune

CAP = 1000.0


def _synthetic(calls):
    """Memory grows with batch and shrinks with checkpointing; fusion speeds up by 10%,
    checkpointing costs 30% at ratio 1."""

    def measure(spec: TrialSpec, cap: float) -> TrialOutcome:
        calls.append((spec.micro_batch_size, spec.ckpt_ratio, spec.fusion))
        peak = 100 + spec.micro_batch_size * 200 * (1 - 0.6 * spec.ckpt_ratio)
        speed = spec.micro_batch_size * (1 - 0.3 * spec.ckpt_ratio) * (1.1 if spec.fusion else 1)
        status = "ok" if peak <= cap else "over_cap"
        # CPU time per step grows with batch and with recomputation; fusion saves 10% of it.
        cpu = spec.micro_batch_size * (1 + 0.3 * spec.ckpt_ratio) * (0.9 if spec.fusion else 1)
        cpu += 0.5 * (spec.micro_batch_size == 4)  # batch 4 is fast in wall time, costly in CPU
        return TrialOutcome(
            status, samples_per_s=speed, step_time_s=1.0, cpu_time_s=cpu, peak_memory_mb=peak
        )

    return measure


def _truth(space):
    best = None
    for b in space.micro_batch_sizes:
        for r in space.ckpt_ratios:
            for f in space.fusion:
                peak = 100 + b * 200 * (1 - 0.6 * r)
                speed = b * (1 - 0.3 * r) * (1.1 if f else 1)
                if peak <= CAP and (best is None or speed > best[0]):
                    best = (speed, b, r, f)
    return best


def test_grid_budget_finds_the_true_optimum_and_prunes_dominated_points():
    space = SearchSpace(micro_batch_sizes=(1, 2, 4, 8), ckpt_ratios=(0.0, 0.5, 1.0))
    calls = []
    result = tune(TrialSpec(), space, CAP, n_trials=space.size, measure=_synthetic(calls))
    speed, b, r, f = _truth(space)
    best = result.best
    assert (best.micro_batch_size, best.ckpt_ratio, best.fusion) == (b, r, f)
    assert best.samples_per_s == pytest.approx(speed)
    assert best.peak_memory_mb <= CAP
    # Every grid point is accounted for; some were skipped without being measured.
    assert len(result.trials) == space.size
    pruned = [t for t in result.trials if t.status == "pruned"]
    assert pruned and len(calls) == space.size - len(pruned)
    for t in pruned:
        assert t.knobs() not in calls


def test_small_budget_uses_tpe_and_never_measures_a_point_twice(monkeypatch):
    studies = []
    create_study = optuna.create_study

    def spy(*args, **kwargs):  # keep the study tune() creates, to see its sampler and trials
        studies.append(create_study(*args, **kwargs))
        return studies[-1]

    monkeypatch.setattr(optuna, "create_study", spy)
    space = SearchSpace(micro_batch_sizes=(1, 2, 4, 8, 16), ckpt_ratios=(0.0, 0.25, 0.5, 1.0))
    calls = []
    result = tune(TrialSpec(), space, CAP, n_trials=12, seed=3, measure=_synthetic(calls))
    [study] = studies
    assert type(study.sampler) is optuna.samplers.TPESampler  # not grid, not random
    # TPE proposed some point again (more proposals than distinct points), yet no point was
    # measured twice
    assert len(study.trials) > len(result.trials)
    assert len(calls) == len(set(calls)) <= 12
    assert len(result.trials) == 12  # the budget counts distinct configurations
    assert result.best is not None and result.best.peak_memory_mb <= CAP
    assert all(t.feasible == (t.status == "ok") for t in result.trials)


def test_cpu_objective_ranks_by_samples_per_cpu_second():
    space = SearchSpace(micro_batch_sizes=(2, 4), ckpt_ratios=(0.0,), fusion=(True,))
    by_wall = tune(TrialSpec(), space, CAP, n_trials=2, measure=_synthetic([]))
    by_cpu = tune(TrialSpec(), space, CAP, n_trials=2, objective="cpu", measure=_synthetic([]))
    assert by_wall.best.micro_batch_size == 4
    assert by_cpu.best.micro_batch_size == 2
    assert '"objective": "cpu"' in by_cpu.to_json()


def test_nothing_fits_gives_no_best():
    space = SearchSpace(micro_batch_sizes=(8,), ckpt_ratios=(0.0,), fusion=(False,))
    result = tune(TrialSpec(), space, 50.0, n_trials=1, measure=_synthetic([]))
    assert result.best is None
    assert '"best": null' in result.to_json()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"memory_cap_mb": 0.0, "n_trials": 3},
        {"memory_cap_mb": 100.0, "n_trials": 0},
        {"memory_cap_mb": 100.0, "n_trials": 1, "objective": "speed"},
    ],
)
def test_bad_search_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        tune(TrialSpec(), SearchSpace(), measure=_synthetic([]), **kwargs)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SearchSpace(micro_batch_sizes=()),
        lambda: SearchSpace(micro_batch_sizes=(0, 1)),
        lambda: SearchSpace(ckpt_ratios=(1.5,)),
        lambda: TrialSpec(micro_batch_size=0),
        lambda: TrialSpec(ckpt_ratio=-0.1),
        lambda: TrialSpec(device="tpu"),
    ],
)
def test_bad_space_or_spec_raises(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        # the three shared "world_size and steps must be >= 1, warmup_steps >= 0"
        ({"world_size": 0}, "world_size must be >= 1, got 0"),
        ({"steps": 0}, "steps must be >= 1, got 0"),
        ({"warmup_steps": -1}, "warmup_steps must be >= 0, got -1"),
    ],
)
def test_bad_spec_count_names_its_field(kwargs, message):
    with pytest.raises(ValueError) as info:
        TrialSpec(**kwargs)
    assert str(info.value) == message


def test_seed_out_of_the_sampler_range_is_refused_naming_the_seed():
    """numpy said "Seed must be between 0 and 2**32 - 1" from inside the sampler."""
    with pytest.raises(ValueError, match=r"^seed must be in \[0, 2\*\*32 - 1\], got -1$"):
        tune(TrialSpec(), SearchSpace(), CAP, 1, seed=-1, measure=_synthetic([]))


def test_spec_round_trips_through_json():
    spec = TrialSpec(model="llama", model_config={"n_layers": 3}, ckpt_ratio=0.5, fusion=True)
    assert TrialSpec.from_json(spec.to_json()) == spec
