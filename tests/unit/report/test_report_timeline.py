"""Deriving the membership timeline and the summary block from a run."""

import statistics

import pytest

from shoal.report.load import load_run
from shoal.report.summary import summarize
from shoal.report.timeline import build_timeline, step_time_s
from unit.report.synthetic_run import JOINER


def _times(run, kind, worker):
    return [e.wall_time_s for e in run.events if e.event == kind and e.worker == worker]


def test_synthetic_lanes_follow_joins_leaves_and_failures(synthetic_dir):
    run = load_run(synthetic_dir)
    tl = build_timeline(run)
    lanes = {lane.worker: lane for lane in tl.lanes}
    assert [lane.worker for lane in tl.lanes] == ["w0", "w1", "w2", "w3"]
    assert tl.start_s == 0.0 and tl.end_s == run.result.wall_time_s
    assert lanes["w0"].intervals == ((0.0, tl.end_s),)
    # w1 fails, then rejoins later: two intervals with a gap
    (fail,), (join,) = _times(run, "fail", "w1"), _times(run, "join", "w1")
    assert lanes["w1"].intervals == ((0.0, fail), (join, tl.end_s))
    assert lanes["w2"].intervals == ((0.0, _times(run, "leave", "w2")[0]),)
    assert lanes["w3"].intervals == ((_times(run, "join", "w3")[0], tl.end_s),)
    assert lanes["w3"].device == JOINER[1]
    assert all(p.time_s == p.event.wall_time_s for p in tl.events)


def test_events_without_wall_time_are_placed_by_step(write_metrics):
    directory = write_metrics(
        [
            {"kind": "step", "step": 10, "wall_time_s": 1.0, "workers": [{"id": "a"}]},
            {"kind": "step", "step": 20, "wall_time_s": 3.0, "workers": [{"id": "a"}]},
            {"kind": "membership", "event": "fail", "worker": "a", "step": 15},
            {"kind": "membership", "event": "join", "worker": "b"},  # no time: table only
        ]
    )
    tl = build_timeline(load_run(directory))
    assert [p.time_s for p in tl.events] == [2.0, None]
    lanes = {lane.worker: lane.intervals for lane in tl.lanes}
    assert lanes == {"a": ((0.0, 2.0),), "b": ()}


def test_step_time_interpolates_and_clamps(write_metrics):
    directory = write_metrics(
        [
            {"kind": "step", "step": 2, "wall_time_s": 4.0},
            {"kind": "step", "step": 4, "wall_time_s": 8.0},
        ]
    )
    steps = load_run(directory).steps
    assert step_time_s(steps, 3) == pytest.approx(6.0)
    assert step_time_s(steps, 0) == 4.0 and step_time_s(steps, 9) == 8.0
    assert step_time_s((), 3) is None


def test_worker_seen_late_without_join_starts_when_first_seen(write_metrics):
    directory = write_metrics(
        [
            {"kind": "step", "step": 1, "wall_time_s": 1.0, "workers": [{"id": "a"}]},
            {"kind": "step", "step": 2, "wall_time_s": 2.0, "workers": [{"id": "a"}, {"id": "b"}]},
        ]
    )
    lanes = {lane.worker: lane.intervals for lane in build_timeline(load_run(directory)).lanes}
    assert lanes == {"a": ((0.0, 2.0),), "b": ((2.0, 2.0),)}


def test_summary_counts_and_recovery(synthetic_dir):
    run = load_run(synthetic_dir)
    s = summarize(run)
    recover_times = [e.recovery_time_s for e in run.events if e.event == "recover"]
    assert (s.joins, s.leaves, s.failures, s.recoveries) == (2, 1, 1, 4)
    assert s.lost_steps == 1
    assert s.median_recovery_time_s == statistics.median(recover_times)
    assert s.from_result and s.final_step == 40 and s.consistency == "exact"


def test_summary_without_result_falls_back_to_metrics(write_metrics):
    directory = write_metrics(
        [
            {"kind": "step", "step": 1, "global_batch_size": 8, "wall_time_s": 1.0},
            {"kind": "step", "step": 2, "global_batch_size": 8, "wall_time_s": 2.0},
        ]
    )
    s = summarize(load_run(directory))
    assert not s.from_result
    assert (s.final_step, s.wall_time_s, s.samples_per_s) == (3, 2.0, 8.0)  # steps done: 0-2
    assert s.median_recovery_time_s is None and s.lost_steps == 0


def test_synthetic_split_is_the_planners(synthetic_dir):
    """Each step's shares are the planner's split over the kinds alive, and cover the batch."""
    # by hand: a micro-batch takes 0.06 s over the table's mean speed (V100 0.851, P100 0.802,
    # K80 0.253): 0.0705, 0.0748 and 0.2373 s. The planner gives each of the 8 micro-batches
    # in turn to the worker that would finish it first (ties: lower rank), which gives the
    # least makespan; per group in rank order (initial, fail, join, leave, rejoin):
    expected = {
        ("v100", "k80", "p100"): (4, 1, 3),  # 0.282 s; (3, 1, 4) and (4, 0, 4) 0.299 s
        ("v100", "p100"): (4, 4),  # 0.299 s; (5, 3) 0.353 s
        ("v100", "p100", "v100"): (3, 2, 3),  # 0.212 s; (3, 3, 2) and (2, 3, 3) 0.224 s
        ("v100", "v100"): (4, 4),
        ("v100", "k80", "v100"): (4, 1, 3),  # 7th to the K80 (0.237 s < 0.282), 8th to rank 0
    }
    run = load_run(synthetic_dir)
    seen = {}
    for s in run.steps:
        counts = tuple(w.micro_batches for w in s.workers)
        seen.setdefault(tuple(w.device for w in s.workers), set()).add(counts)
        assert sum(counts) * s.micro_batch_size == s.global_batch_size
    assert seen == {group: {counts} for group, counts in expected.items()}
    # the slow kind gets fewer micro-batches than the fast one
    first = {w.device: w.micro_batches for w in run.steps[0].workers}
    assert first["k80"] < first["v100"]
