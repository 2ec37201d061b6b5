"""The parameter-server model of the transient-server paper: fitted only on measurements, judged on
held-out ones.

Inputs: the paper's per-run durations and evaluation curves (`shoal.sim.transient_data`), the
measured VM lifetimes and the device table (only to place a kind the fit never saw). Targets:
each held-out configuration's measured mean +- 1 sample sd over its runs.
- size split (fit on 1/2/4 workers, predict 8): 8 V100 on 1 and on 2 PS, 8 on-demand K80 and
  8-K80 spot without and with revocations land within 1 sd. One known miss, kept visible: 8 K80
  on 2 PS (-2.2 %, z = -2.4: the 2-PS K80 series' steady cycle is flat from 2 to 7 workers and
  1.6 % longer at 8, measured hours after the others). Every held-out row is within 5 %.
- kind split (fit on K80 and V100, predict P100 placed by Gavel's speeds): both P100 rows
  within 1 sd.
"""

import json
import math
import runpy
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from shoal.cli import main
from shoal.errors import UserError
from shoal.sim.transient import ClusterConfig, _replay, replicate_cluster
from shoal.sim.transient_data import curve_split, load_measurements
from shoal.sim.transient_fit import make_split, predict
from shoal.sim.transient_model import fit
from shoal.sim.transient_spec import parse_cluster

# paper, unrounded from its agg_data tables (see test_transient.py): hours, sd, USD, sd
PAPER = {
    2: (2.1568, 0.4994, 1.313, 0.083),
    4: (1.0458, 0.1667, 1.1567, 0.0369),
    8: (0.5112, 0.0144, 1.1145, 0.0222),
}


@pytest.fixture(scope="module")
def full_model():
    return fit(load_measurements())


@pytest.mark.parametrize("name", ["size", "kind"])
def test_fit_uses_no_held_out_row(name):
    split = make_split(name)
    held = {m.name for m in split.held_out}
    assert held and not held & {m.name for m in split.fit_rows}

    # scaling every held-out run's times 3x must leave the fitted model unchanged
    def scaled(m):
        times = {f: tuple(3 * t for t in getattr(m, f)) for f in ("durations_s", "steady_s")}
        return replace(m, **times, offsets_s=tuple(o + 99 for o in m.offsets_s))

    rows = tuple(scaled(m) if m.name in held else m for m in load_measurements())
    assert make_split(name, rows).model() == split.model()


def test_evaluation_curves_split_each_duration():
    # a restarted run (two step-0 points) on an exact line: 0.1 s per step, 12 s start offset
    points = [(0, 100.0), (0, 500.0)] + [(s, 512 + 0.1 * s) for s in range(4000, 68001, 4000)]
    duration, steady, offset = curve_split(points)
    assert (duration, steady, offset) == pytest.approx((6412, 6400, 12))
    assert curve_split(points[:-2]) is None  # never reached 64,000 steps
    for m in load_measurements():
        assert len(m.steady_s) == len(m.offsets_s) == len(m.durations_s), m.name
        # a duration is its line's end plus the last point's poll delay (< a minute)
        gap = m.mean_s - m.steady_mean_s - statistics.mean(m.offsets_s)
        assert abs(gap) < 35, (m.name, gap)


def test_size_split_predicts_eight_workers():
    split = make_split("size")
    assert {m.num_workers for m in split.fit_rows} == {1, 2, 4}
    preds = {p.name: p for p in predict(split, spot_replays=300, seed=3)}
    within = {n for n, p in preds.items() if p.within_one_sd}
    assert within >= {"1ps8v", "2ps8v", "8-spot-r0", "8-spot (revocations)"}, preds
    assert within >= {"8-demand"}, preds  # a miss when fitted on durations (z -1.14)
    assert {n for n, p in preds.items() if p.within_one_sd is False} == {"2ps8k"}
    for p in preds.values():
        assert abs(p.predicted_s / p.measured_mean_s - 1) < 0.05, p


def test_kind_split_predicts_p100_from_k80_and_v100():
    split = make_split("kind")
    assert "p100" not in {m.kind for m in split.fit_rows}
    preds = predict(split)
    assert {p.name for p in preds} == {"p100", "4p100"}
    assert all(p.within_one_sd for p in preds), preds


def test_v100_is_far_less_than_its_compute_ratio_faster(full_model):
    m = full_model
    compute_ratio = m.compute("k80") / m.compute("v100")
    one_ps = m.steps_per_s(["v100"] * 8, 1) / m.steps_per_s(["k80"] * 8, 1)
    assert compute_ratio > 3.5 and one_ps < 1.5
    # a second parameter server lifts V100 (the paper: up to 1.75x) and barely moves K80
    assert m.steps_per_s(["v100"] * 8, 2) / m.steps_per_s(["v100"] * 8, 1) > 1.5
    assert m.steps_per_s(["k80"] * 8, 2) / m.steps_per_s(["k80"] * 8, 1) < 1.1


def test_mixed_cluster_shares_the_servers(full_model):
    m = full_model
    mixed = m.step_times_s(["k80", "k80", "v100"], 1)
    assert mixed[0] == mixed[1] > mixed[2]
    # adding a V100 slows the K80s: the server is shared
    assert mixed[0] > m.step_times_s(["k80", "k80"], 1)[0]
    # no cluster steps faster than one server can take updates, bar the jitter smoothing
    assert m.steps_per_s(["v100"] * 64, 1) < 1 / m.ps_service_s


def test_queue_wait_is_kingmans_and_a_hard_max_without_spread(full_model):
    m = full_model
    base = [m.compute("v100") + m.latency_s] * 6
    w = m.queue_wait_s(base, 1)
    d, t = m.ps_service_s, base[0] + w
    rho = len(base) * d / t
    scv = (m.service_sd_s / d) ** 2 + (m.cycle_sd_s / t) ** 2
    assert 0 < rho < 1 and w == pytest.approx(d * rho / (1 - rho) * scv / 2, rel=1e-9)
    # with no spread the wait is 0 below the servers' bound and exactly the excess above it
    sharp = replace(m, service_sd_s=0.0, cycle_sd_s=0.0)
    assert sharp.queue_wait_s(base[:2], 1) == 0.0
    assert sharp.queue_wait_s(base, 1) == pytest.approx(6 * d - base[0], rel=1e-9)


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_spot_k80_time_and_cost_with_fitted_model(full_model, workers):
    # the meaning of test_transient.py's acceptance, with step rates from the fitted model
    cfg = ClusterConfig(parse_cluster(f"{workers}xk80@us-east1:spot"), full_model)
    s = replicate_cluster(cfg, 600, seed=11)
    hours, hours_sd, cost, cost_sd = PAPER[workers]
    assert abs(s.mean_hours - hours) <= hours_sd, s
    assert abs(s.mean_cost_usd - cost) <= cost_sd, s


def test_revoked_fraction_with_fitted_model(full_model):
    revoked = servers = 0
    for workers in (2, 4, 8):
        cfg = ClusterConfig(parse_cluster(f"{workers}xk80:spot"), full_model)
        s = replicate_cluster(cfg, 32 * 20, seed=14)
        revoked, servers = revoked + s.revoked, servers + s.servers
    p = 28 / 448
    assert abs(revoked / servers - p) <= math.sqrt(p * (1 - p) / 448)


def test_lifetimes_by_region(full_model):
    # the measured us-east1 K80s lived their full day; europe-west1 lost 6 of 16 early
    east = ClusterConfig(parse_cluster("8xk80@us-east1:spot"), full_model, by_region=True)
    west = ClusterConfig(parse_cluster("8xk80@europe-west1:spot"), full_model, by_region=True)
    assert replicate_cluster(east, 100, seed=5).revoked == 0
    assert replicate_cluster(west, 100, seed=5).revoked > 0


def test_cluster_spec():
    c = parse_cluster("4xk80@us-east1-c:spot, 1xv100@us-west1, ps@us-east1:on_demand=0.2")
    assert [w.kind for w in c.workers] == ["k80"] * 4 + ["v100"]
    assert c.workers[0].region == "us-east1" and c.workers[0].price_usd_per_hour == 0.256
    assert c.workers[4].tier == "on_demand" and c.workers[4].price_usd_per_hour == 2.144
    assert [(s.region, s.price_usd_per_hour) for s in c.servers] == [("us-east1", 0.2)]
    assert c.cross_region_workers == 1
    assert parse_cluster("0xps,p100:spot").servers == ()
    assert len(parse_cluster("2xv100@asia-east1:spot").servers) == 1  # default: one on-demand PS


def test_cluster_spec_tier_and_region_are_case_insensitive_as_the_kind_is(tmp_path):
    """`2xK80` was taken but `2xk80:SPOT` refused as a bad item."""
    lower = parse_cluster("2xk80@us-east1:spot,ps@us-west1-b:on_demand=0.2")
    assert parse_cluster("2xK80@US-EAST1:SPOT,PS@US-WEST1-B:ON_DEMAND=0.2") == lower
    assert parse_cluster("2xk80:On-Demand") == parse_cluster("2xk80:on_demand")
    path = tmp_path / "cluster.txt"
    path.write_text("# upper case\n2xK80@US-EAST1:Spot\nPS@US-WEST1-B:ON_DEMAND=0.2\n")
    assert parse_cluster(f"@{path}") == lower
    with pytest.raises(UserError, match="unknown tier 'CHEAP'"):
        parse_cluster("4xk80:CHEAP")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("4xk80@us-east9:spot", "unknown region 'us-east9'"),
        ("4xa100@us-east1", "unknown device kind 'a100'"),
        ("4xk80:cheap", "unknown tier 'cheap'"),
        ("0xps,2xk80", "needs exactly one worker"),
        ("ps@us-east1", "at least one GPU worker"),
        ("99999999xk80", r"bad server count .* \(1 to 10,000\)"),  # hung building the list
        ("6000xk80,6000xv100", "'6000xv100': 12,000 servers so far, more than 10,000"),
        # a bare "could not convert string to float: '1.2.3'", naming no item
        ("2xk80,k80:spot=1.2.3", "^cluster spec item 'k80:spot=1.2.3': bad price '1.2.3'"),
        ("k80:spot=.", "^cluster spec item 'k80:spot=.': bad price '.'"),
    ],
)
def test_cluster_spec_errors(spec, message):
    with pytest.raises(UserError, match=message):
        parse_cluster(spec)


def test_cluster_file_of_many_big_items_stops_at_the_bound(tmp_path):
    """3,000 lines of 10000xk80 built a list of 30 million servers (500 MB, seconds) before the
    total was checked; 100,000 lines exhausted memory. It stops at the line past the bound."""
    path = tmp_path / "cluster.txt"
    path.write_text("10000xk80\n" * 3000)
    with pytest.raises(UserError, match=f"{path}:2: 20,000 servers so far, more than 10,000"):
        parse_cluster(f"@{path}")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--runs", "999999999"], "--runs 999999999: at most 1,000,000"),  # hung
        (["--runs", "400000"], "--runs 400000 x 3 servers: at most 1,000,000 runs x servers"),
        # absurd hours; past ~1e308 a traceback (int too large to convert to float)
        (["--steps", "99999999999999"], "--steps 99999999999999: at most 1,000,000,000,000"),
        (["--steps", "1" + "0" * 400], "--steps 1000"),
        (["--runs", "0"], "--runs and --steps must be >= 1"),
    ],
)
def test_cli_sizes_are_bounded_one_line_exit_2(capsys, argv, message):
    assert main(["transient", "--cluster", "2xk80:spot", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_replay_work_grows_with_the_kinds_not_the_servers(full_model, monkeypatch):
    """A run of 10,000 servers with ~2,700 revocations took 7 s: every revocation recomputed the
    step rate worker by worker (and sorted the alive servers). It now costs a term per kind."""
    cluster = parse_cluster("k80,1999xk80:spot,v100:spot")
    cfg = ClusterConfig(cluster, full_model, total_steps=10**12)
    calls = []
    compute = type(full_model).compute
    monkeypatch.setattr(type(full_model), "compute", lambda m, k: calls.append(k) or compute(m, k))
    s = replicate_cluster(cfg, 1, seed=0)
    assert s.completed == 1 and s.revoked > 300
    assert len(calls) <= 3 * (s.revoked + 1)  # two kinds per rate, was ~2,000 per revocation
    counts = {"k80": 7, "v100": 3}
    by_kind = full_model.steps_per_s_by_kind(counts, 2)
    assert by_kind == pytest.approx(full_model.steps_per_s(["k80"] * 7 + ["v100"] * 3, 2))


def test_missing_cluster_file(tmp_path):
    with pytest.raises(UserError, match="cannot read cluster file"):
        parse_cluster(f"@{tmp_path / 'nope.txt'}")


def test_at_sign_alone_names_no_file():
    """Was "cannot read cluster file '.': Is a directory" (Path('') is the working folder)."""
    with pytest.raises(UserError, match=r"^cluster spec '@' names no file \(@FILE\)$"):
        parse_cluster("@")


def test_binary_cluster_file(tmp_path):
    """Was a bare "'utf-8' codec can't decode byte 0xff", naming no file."""
    path = tmp_path / "cluster.bin"
    path.write_bytes(b"\xff\xfe4xk80\n")
    with pytest.raises(UserError, match="cannot read cluster file .*cluster.bin.*: not UTF-8"):
        parse_cluster(f"@{path}")


def test_cluster_file_may_start_with_a_byte_order_mark(tmp_path):
    """As the workload and trace files may (a spreadsheet's export): it was refused as an
    unknown kind '\ufeff4xk80'."""
    path = tmp_path / "cluster.txt"
    path.write_text("\ufeff4xk80@us-east1:spot\n", encoding="utf-8")
    assert parse_cluster(f"@{path}") == parse_cluster("4xk80@us-east1:spot")


def test_cluster_file_error_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "cluster.txt"
    path.write_text("# two regions\n4xk80@us-east1:spot\n2xp100@mars-1:spot  # typo\n")
    assert main(["transient", "--cluster", f"@{path}", "--runs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"shoal: error: {path}:3: unknown region 'mars-1'")
    assert main(["transient", "--cluster", "2xk80@us-east1:spot,1xh100", "--runs", "2"]) == 2
    assert "unknown device kind 'h100'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec, lines, needle",
    [
        # "no measured ResNet-18 ... speed for kind 't4'": which item, which file line?
        ("2xk80,t4:spot", None, "cluster spec item 't4:spot': no measured ResNet-18"),
        ("@{path}", "2xk80:spot\n\nt4:spot\n", "{path}:3: no measured ResNet-18"),
        ("@{path}", "# a\n2xk80\nk80:spot=1.2.3\n", "{path}:3: bad price '1.2.3'"),
    ],
)
def test_cli_item_errors_name_the_item_or_line(tmp_path, capsys, spec, lines, needle):
    path = tmp_path / "cluster.txt"
    if lines is not None:
        path.write_text(lines)
    assert main(["transient", "--cluster", spec.format(path=path), "--runs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"shoal: error: {needle.format(path=path)}")


def test_revoked_workers_count_no_parameter_server(full_model):
    """`--cluster k80,ps:spot` said "revoked workers: 11 of 200" with its only worker on demand:
    the 11 were the spot server's revocations, which fail the run (counted there)."""
    s = replicate_cluster(ClusterConfig(parse_cluster("k80,ps:spot"), full_model), 200, seed=3)
    assert s.completed < s.runs and s.revoked == 0 and s.servers == 200
    # a server lost after a worker: the worker counts, the server fails the run
    run = _replay([math.inf, 3.0, 5.0], [1.0] * 3, ["k80", "k80", None],
                  lambda alive: 1.0, 100, [True, False, True], num_workers=2)  # fmt: skip
    assert (run.revoked, run.failed, run.duration_s) == (1, True, 5.0)


def test_cli_runs_a_mixed_cluster(capsys):
    code = main(["transient", "--cluster", "2xk80@us-east1:spot,v100@us-west1", "--runs", "5"])
    out = capsys.readouterr().out
    assert code == 0 and "steps/s at start" in out and "cross-region" in out


def test_heldout_bench_smoke(capsys):
    bench = Path(__file__).parents[3] / "bench" / "transient_heldout.py"
    runpy.run_path(str(bench))["main"](5, True)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    held = [r for r in rows if "config" in r]
    assert {r["split"] for r in held} == {"size", "kind"}
    assert all(r["predicted_s"] > 0 for r in held)


def test_select_bench_smoke(capsys):
    # the earlier smooth-max model, rebuilt as a candidate, scores as it did when it shipped
    bench = Path(__file__).parents[3] / "bench" / "transient_select.py"
    # and the Kingman loop fitted on durations is the model shipped before the evaluation curves
    runpy.run_path(str(bench))["main"](True, ["smooth-max", "kingman"], quick=True)
    old, kingman = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert old["in_sample"] == {"mean_abs_error_pct": 1.53, "within_1sd": 23, "multi_run": 32}
    assert kingman["in_sample"] == {"mean_abs_error_pct": 1.32, "within_1sd": 25, "multi_run": 32}


@pytest.mark.parametrize(
    "spec, lost",
    [("2xk80", False), ("8xk80@europe-west1:spot", True)],  # on demand: every run completes
)
def test_cli_names_lost_runs_only_when_some_were_lost(capsys, spec, lost):
    assert main(["transient", "--cluster", spec, "--runs", "40", "--seed", "1", "--by-region"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("runs: "))
    assert line.startswith("runs: 40, completed 40") != lost
    assert ("the rest lost their chief or a server" in line) == lost
