"""The lease and cost lines of metrics.jsonl, result.json's cost block, and the report's use of
them: round trips, validation, and the ledger recomputed from the lease lines."""

import json

import pytest

from shoal.cluster.ledger import CostLedger
from shoal.errors import UserError
from shoal.metrics.cost import CostLine, LeaseLine
from shoal.metrics.files import RunResult, parse_line, read_metrics
from shoal.report.load import load_run
from shoal.report.plots_optional import cost_by_kind
from shoal.report.summary import summarize


def test_lease_and_cost_lines_round_trip():
    lease = LeaseLine("close", "k80-spot-1", "k80", "spot", 0.256, 70.0, "w1", "revoked", 0.005)
    assert parse_line(json.dumps(lease.to_json()), "m") == lease
    cost = CostLine(10.0, 0.5, {"k80": 0.5}, {"k80:spot": 2}, 900.0, 1.25)
    assert parse_line(json.dumps(cost.to_json()), "m") == cost
    over = CostLine(10.0, 0.5, {"k80": 0.5}, {"k80:spot": 1}, 900.0, 1.25, over_budget=True)
    assert parse_line(json.dumps(over.to_json()), "m") == over
    late = CostLine(10.0, 0.5, {"k80": 0.5}, {"v100:spot": 4}, 900.0, 1.25, past_deadline=True)
    assert parse_line(json.dumps(late.to_json()), "m") == late
    assert late.to_json()["past_deadline"] is True
    assert "over_budget" not in cost.to_json()  # left out unless true
    assert "past_deadline" not in cost.to_json() and "past_deadline" not in over.to_json()


@pytest.mark.parametrize(
    "line, needle",
    [
        ({"kind": "lease", "action": "open"}, "'server'"),
        ({"kind": "lease", "action": "rent", "server": "a"}, "'action'"),
        ({"kind": "cost", "t_s": 1.0}, "'usd'"),
        ({"kind": "cost", "t_s": 1.0, "usd": 1.0, "by_kind": {"k80": "a lot"}}, "'by_kind'"),
    ],
)
def test_bad_lines_name_the_key(line, needle):
    with pytest.raises(UserError, match=needle):
        parse_line(json.dumps(line), "m line 3")


def test_result_cost_block():
    raw = {"final_step": 3, "cost": {"usd": 1.5, "by_kind": {}, "by_tier": {}, "revocations": 2}}
    assert RunResult.from_json(raw).cost["revocations"] == 2
    with pytest.raises(UserError, match="'cost'"):
        RunResult.from_json({"cost": {"dollars": 1}})


def write_run(tmp_path, leases):
    """A run directory with one step line and these (server, kind, price, open, close, cause)."""
    ledger = CostLedger()
    lines = [{"kind": "step", "step": 0, "loss": 1.0, "wall_time_s": 0.1}]
    for server, kind, price, start, _, _ in leases:
        ledger.open(server, kind, price, start)
        lines.append(LeaseLine("open", server, kind, "spot", price, start).to_json())
    for server, kind, price, _, end, cause in sorted(leases, key=lambda x: x[4]):
        usd = ledger.close(server, end)
        lines.append(
            LeaseLine("close", server, kind, "spot", price, end, None, cause, usd).to_json()
        )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return ledger


def test_report_reads_leases_and_recomputes_the_cost(tmp_path):
    leases = [
        ("a", "k80", 0.256, 0.0, 3600.0, "end"),
        ("b", "v100", 0.861, 600.0, 2400.0, "revoked"),
    ]
    ledger = write_run(tmp_path, leases)
    run = load_run(tmp_path)
    assert len(run.leases) == 4 and not run.events  # not membership events
    assert len(list(read_metrics(tmp_path / "metrics.jsonl"))) == 5
    assert ledger.total_usd == pytest.approx(0.256 + 0.861 * 0.5)
    summary = summarize(run)  # no result.json: from the lease lines
    assert summary.cost_usd == pytest.approx(ledger.total_usd) and summary.revocations == 1
    mid = cost_by_kind(run, 1200.0)  # a's first 1200 s, b's first 600 s
    assert mid == pytest.approx({"k80": 0.256 / 3, "v100": 0.861 / 6})
    assert sum(cost_by_kind(run, 1e9).values()) == pytest.approx(ledger.total_usd)
