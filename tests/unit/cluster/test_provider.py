"""The emulated provider: seeded spot lifetimes, quota, outages, and its input parsers."""

import math
import random

import pytest

from shoal.cluster.provider import (
    ANY_KIND,
    EmulatedProvider,
    load_spot_trace,
    parse_spot_lifetimes,
    provider_from_config,
)
from shoal.cluster.revocation import EmpiricalLifetimes, TraceRevocations, revocation_model
from shoal.config.provider import ProviderConfig
from shoal.errors import UserError


def _requests(provider, n=6):
    return [provider.request("k80", "spot", 10.0 * i) for i in range(n)]


def test_same_seed_same_leases_and_the_documented_draw():
    a = _requests(EmulatedProvider(("k80",), seed=3))
    b = _requests(EmulatedProvider(("k80",), seed=3))
    assert a == b
    other = _requests(EmulatedProvider(("k80",), seed=4))
    assert [x.revoke_at_s for x in other] != [x.revoke_at_s for x in a]
    # all six held at once: the n-th takes slot n, its first use, and draws its lifetime from
    # Random(f"{seed}:0:{kind}:{tier}:{slot}:{use}") with the kind's model
    model = EmulatedProvider(("k80",)).model("k80")
    for n, lease in enumerate(a):
        life = model.sample_lifetime_s("k80", random.Random(f"3:0:k80:spot:{n}:0"))
        assert lease.revoke_at_s == lease.ready_s + life
        assert lease.ready_s == lease.requested_s + 60.0 and lease.notice_s == 30.0
        assert lease.server == f"k80-spot-{n}"


def test_an_extra_server_changes_no_other_servers_lifetime():
    """Draws are keyed by (kind, tier, slot, use): a server bought and given back (or one of
    another kind) in one run but not in another leaves every other server's lifetime alone,
    so two drivers that differ in one decision still meet the same revocations."""

    def lives(extra: bool) -> list[float]:
        g4dn = revocation_model("g4dn")  # lives of about an hour: every draw is finite
        provider = EmulatedProvider(
            ("k80", "p100"), seed=7, startup_s=0.0, lifetimes={"k80": g4dn, "p100": g4dn}
        )
        out = [provider.request("p100", "spot", 0.0), provider.request("p100", "spot", 0.0)]
        if extra:
            provider.release(provider.request("p100", "spot", 5.0).server, 6.0)
            provider.request("k80", "spot", 7.0)
        provider.release(out[0].server, 10.0)  # slot 0 again, its second use
        out.append(provider.request("p100", "spot", 10.0))
        return [x.revoke_at_s - x.ready_s for x in out]

    plain, perturbed = lives(False), lives(True)
    assert plain == perturbed
    g4dn = revocation_model("g4dn")  # slot 0's second server: its own, second draw
    assert plain[2] == g4dn.sample_lifetime_s("p100", random.Random("7:0:p100:spot:0:1"))


def test_a_replacement_draws_the_same_life_asked_at_the_notice_or_after_the_revocation():
    """The simulator asks for a revoked server's replacement at the notice, the live driver
    once the worker is gone: a lease under its notice has given its slot up, so both
    replacements take the same slot and draw the same lifetime."""

    def replacement_life(ask_at_notice: bool) -> tuple[float, float]:
        g4dn = revocation_model("g4dn")
        provider = EmulatedProvider(("p100",), seed=3, startup_s=0.0, lifetimes={"p100": g4dn})
        first = [provider.request("p100", "spot", 0.0) for _ in range(2)]
        doomed = min(first, key=lambda x: x.revoke_at_s)
        when = doomed.revoke_at_s - (doomed.notice_s / 2 if ask_at_notice else -1.0)
        new = provider.request("p100", "spot", when)
        return new.revoke_at_s - new.ready_s, doomed.revoke_at_s

    (at_notice, gone_at), (after, _) = replacement_life(True), replacement_life(False)
    assert at_notice == after
    g4dn = revocation_model("g4dn")  # the doomed server's slot, its second use
    slot = (
        0
        if gone_at
        == EmulatedProvider(("p100",), seed=3, startup_s=0.0, lifetimes={"p100": g4dn})
        .request("p100", "spot", 0.0)
        .revoke_at_s
        else 1
    )
    assert at_notice == g4dn.sample_lifetime_s("p100", random.Random(f"3:0:p100:spot:{slot}:1"))


def test_on_demand_is_never_revoked_and_priced_from_the_device_table():
    lease = EmulatedProvider(("v100",)).request("v100", "on_demand", 5.0)
    assert lease.revoke_at_s == math.inf and lease.notice_s is None
    assert lease.usd_per_hour == 2.144 and lease.requested_s == 5.0


def test_fixed_lifetimes_and_no_notice():
    provider = EmulatedProvider(
        ("k80",), lifetimes={"k80": TraceRevocations((500.0,))}, startup_s=10.0, notice_s=None
    )
    lease = provider.request("k80", "spot", 0.0)
    assert lease.revoke_at_s == 510.0 and lease.notice_s is None


def test_quota_refuses_then_frees_on_release_and_on_revocation():
    provider = EmulatedProvider(
        ("k80",), lifetimes={"k80": TraceRevocations((100.0,))}, quota={("k80", "spot"): 1}
    )
    first = provider.request("k80", "spot", 0.0)
    assert provider.request("k80", "spot", 1.0) is None
    provider.release(first.server, 2.0)
    second = provider.request("k80", "spot", 2.0)
    assert second is not None and provider.request("k80", "spot", 3.0) is None
    # revoked at 2 + 60 + 100: its slot is free again from then on
    assert provider.request("k80", "spot", second.revoke_at_s) is not None


def test_outage_refuses_and_hides_the_offer():
    provider = EmulatedProvider(("k80", "v100"), outages=(("k80", "spot", 100.0, 200.0),))
    assert provider.request("k80", "spot", 150.0) is None
    offered = {(o.kind, o.tier) for o in provider.offers(150.0)}
    assert ("k80", "spot") not in offered and ("k80", "on_demand") in offered
    assert provider.request("k80", "spot", 200.0) is not None
    spot = next(o for o in provider.offers(0.0) if (o.kind, o.tier) == ("v100", "spot"))
    assert spot.usd_per_hour == 0.861 and spot.notice_s == 30.0 and spot.quota == 8


def test_unknown_kind_is_a_user_error():
    with pytest.raises(UserError, match="unknown device kind 'h100'"):
        EmulatedProvider(("h100",))
    with pytest.raises(UserError, match="does not offer 'v100'"):
        EmulatedProvider(("k80",)).request("v100", "spot", 0.0)
    with pytest.raises(UserError, match="unknown pricing tier"):
        EmulatedProvider(("k80",)).request("k80", "reserved", 0.0)


def test_parse_spot_lifetimes():
    models = parse_spot_lifetimes("K80:gce, v100:p3")
    assert isinstance(models["k80"], EmpiricalLifetimes)
    assert isinstance(models["v100"], TraceRevocations)
    for bad, needle in [
        ("k80", "expected KIND:MODEL"),
        ("h100:gce", "unknown device kind"),
        ("k80:weibull", "unknown revocation model"),
    ]:
        with pytest.raises(UserError, match=needle):
            parse_spot_lifetimes(bad)


def test_load_spot_trace_csv_and_bamboo(tmp_path):
    csv = tmp_path / "life.csv"
    csv.write_text("# kind,lifetime_s\nk80,100\nk80,inf\nV100,50\n")
    models = load_spot_trace(str(csv))
    assert models["k80"].lifetimes_s == (100.0, math.inf) and models["v100"].lifetimes_s == (50.0,)
    bamboo = tmp_path / "trace.csv"
    bamboo.write_text("0,add,node1\n0,add,node2\n5000,remove,node1\n")
    (model,) = load_spot_trace(str(bamboo)).values()
    assert load_spot_trace(str(bamboo)).keys() == {ANY_KIND}
    assert model.lifetimes_s == (5.0, math.inf)  # node2 never removed: censored


@pytest.mark.parametrize(
    "text, needle",
    [
        ("k80,100\nk80,soon\n", ":2: expected"),
        ("k80,100\nh100,5\n", ":2: unknown device kind 'h100'"),
        ("k80,-1\n", ":1: expected"),
        ("0,add,n1\nk80,5\n", ":2: mixes"),
        ("# nothing\n", "no lifetimes"),
        ("1000,add,n1\n500,remove,n1\n", ":2: node n1 removed before it was added"),
        # a NaN lifetime (inf - inf, NaN - NaN), taken silently: no revocation, exit 0
        ("1e400,add,n1\n1e401,remove,n1\n", ":1: expected 'ms,add|remove,node'"),
        ("0,add,n1\nnan,remove,n1\n", ":2: expected 'ms,add|remove,node'"),
        # removals of nodes never added: no lifetime to draw (an IndexError in the run)
        ("100,remove,n1\n", "no node is added in the file"),
    ],
)
def test_malformed_trace_names_file_and_line(tmp_path, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(UserError, match=needle) as info:
        load_spot_trace(str(path))
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="cannot read"):
        load_spot_trace(str(tmp_path / "missing.csv"))


def test_provider_from_config_dict(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("k80,1000\n")
    provider = provider_from_config(
        {
            "kinds": "k80,v100",
            "seed": 2,
            "spot_trace": str(trace),
            "spot_lifetimes": "v100:none",
            "startup_s": 5,
            "notice_s": None,
            "quota": {"k80:spot": 1},
            "outages": [["v100", "on_demand", 0, 10]],
        }
    )
    assert provider.kinds == ("k80", "v100") and provider.seed == 2
    lease = provider.request("k80", "spot", 0.0)
    assert lease.revoke_at_s == 1005.0 and lease.notice_s is None
    assert provider.request("k80", "spot", 0.0) is None
    assert provider.request("v100", "spot", 0.0).revoke_at_s == math.inf
    assert provider.request("v100", "on_demand", 5.0) is None
    with pytest.raises(UserError, match="unknown device kind"):
        provider_from_config({"kinds": ["k80", "a100"]})


@pytest.mark.parametrize(
    "quota",
    [
        ProviderConfig(name="local", kinds="k80", quota=("k80:spot=1",)),  # `shoal run --quota`
        {"kinds": "k80", "quota": [["k80", "spot", 1]]},  # a scenario file's quota
    ],
)
def test_quota_keyed_by_kind_and_tier_pairs(quota):
    """`--quota KIND:TIER=N` reaches the provider as (kind, tier) keys: it used to fail to
    unpack them ('not enough values to unpack'), so any --quota stopped `shoal run`."""
    provider = provider_from_config(quota)
    assert provider.quota == {("k80", "spot"): 1}
    with pytest.raises(UserError, match="unknown device kind 'tpu'"):
        provider_from_config(ProviderConfig(name="local", kinds="k80", quota=("tpu:spot=1",)))


def test_the_shipped_bamboo_trace_loads_as_the_revocation_module_reads_it():
    from importlib import resources

    from shoal.cluster.revocation import load_bamboo_trace

    path = resources.files("shoal.data").joinpath("preemption", "bamboo", "p3-trace.csv")
    (model,) = load_spot_trace(str(path)).values()
    assert model.lifetimes_s == load_bamboo_trace("p3").lifetimes_s


def test_recovery_flag_is_checked():
    """`--recovery restart` holds the --workers mix: with --autoscale, or an unknown strategy,
    one line (UserError) before anything starts; restart needs --provider like its siblings."""
    from shoal.config import ProviderConfig

    assert ProviderConfig(name="local", recovery="restart").recovery == "restart"
    with pytest.raises(UserError, match="drop --autoscale"):
        ProviderConfig(name="local", recovery="restart", autoscale=True, deadline="1h")
    with pytest.raises(UserError, match="peers or restart"):
        ProviderConfig(name="local", recovery="again")
    with pytest.raises(UserError, match="--recovery needs --provider local"):
        ProviderConfig(recovery="restart")


def test_continue_numbering_skips_earlier_servers():
    from shoal.cluster.provider import provider_from_config
    from shoal.config import ProviderConfig

    provider = provider_from_config(ProviderConfig(name="local", kinds="k80"))
    first = provider.request("k80", "spot", 0.0)
    provider = provider_from_config(ProviderConfig(name="local", kinds="k80"))
    provider.continue_numbering(5)
    again = provider.request("k80", "spot", 0.0)
    assert again.server == "k80-spot-5"
    assert again.revoke_at_s != first.revoke_at_s  # slot 0 after a resume: a fresh draw


@pytest.mark.parametrize(
    "change, needle",
    [
        # tracebacks: 'int' object is not iterable / has no attribute 'lower' / 'split'
        ({"kinds": 5}, "kinds must be a list of kind names"),
        ({"kinds": [5]}, "kinds must be a list of kind names"),
        ({"spot_lifetimes": 5}, "spot_lifetimes must be a string or null"),
        ({"spot_trace": 5}, "spot_trace must be a string or null"),
        ({"spot_trace": ["a"]}, "spot_trace must be a string or null"),
        # taken silently: the first kind only, a misspelt field ignored, int(1.9)
        ({"kinds": {"k80": 1}}, "kinds must be a list of kind names"),
        ({"notice": 10}, "unknown field 'notice' \\(known: kinds, seed,"),
        ({"seed": 1.9}, "seed must be an integer"),
    ],
)
def test_provider_json_fields_are_checked(change, needle):
    with pytest.raises(UserError, match=f"^provider: {needle}"):
        provider_from_config({"kinds": ["k80", "v100"], "seed": 1, **change})


def test_provider_json_as_a_live_run_writes_it(tmp_path):
    """Every field the live driver writes into OUT/scenario.json is accepted (with nulls)."""
    from shoal.cluster.provider import JSON_FIELDS

    written = {
        "kinds": ["k80"], "seed": 3, "spot_lifetimes": None, "spot_trace": None,
        "startup_s": 60.0, "notice_s": None, "quota": [], "outages": [], "time_scale": 80.0,
    }  # fmt: skip
    assert set(written) == set(JSON_FIELDS)
    provider = provider_from_config(written)
    assert provider.kinds == ("k80",) and provider.seed == 3 and provider.notice_s is None


def test_a_trace_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffk80,100\nk80,inf\n".encode())
    assert load_spot_trace(str(path))["k80"].lifetimes_s == (100.0, math.inf)


@pytest.mark.parametrize("span", ["0-1e400", "1e400-1e400", "0-inf", "nan-10", "0-nan"])
def test_outage_bounds_must_be_finite(span):
    """END 1e400 (inf) was an outage that never ends, taken without a word."""
    item = f"k80:spot:{span}"
    with pytest.raises(UserError, match=f"^--outage {item}: A and B must be finite"):
        ProviderConfig(name="local", kinds="k80", outages=(item,))
    config = ProviderConfig(name="local", kinds="k80", outages=("k80:spot:0-1e300",))
    assert config.outage_list == (("k80", "spot", 0.0, 1e300),)
    with pytest.raises(UserError, match="^outage of k80:spot needs finite"):  # a scenario's
        EmulatedProvider(("k80",), outages=(("k80", "spot", 0.0, math.inf),))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"quota": ("k80:spot=1", "K80:spot=2")}, "^--quota: k80:spot given twice$"),
        ({"outages": ("k80:spot:10-0",)}, "^--outage k80:spot:10-0: needs 0 <= A <= B"),
        ({"outages": ("k80:spot:-5-10",)}, "^--outage"),
    ],
)
def test_quota_and_outage_items_are_refused_naming_the_flag(fields, message):
    with pytest.raises(UserError, match=message):
        config = ProviderConfig(name="local", kinds="k80", **fields)
        config.quota_map, config.outage_list  # noqa: B018 (checked where they are read)


def test_a_kind_given_twice_in_spot_lifetimes_is_refused():
    assert set(parse_spot_lifetimes("k80:gce,v100:p3")) == {"k80", "v100"}
    with pytest.raises(UserError, match="^--spot-lifetimes: k80 given twice$"):
        parse_spot_lifetimes("k80:gce,K80:p3")
