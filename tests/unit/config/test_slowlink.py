"""The slow-link section of a run's configuration: the site spec's grammar and the batch
policies it does not combine with, each a one-line error naming the flag."""

import pytest

from shoal.config import SlowLinkConfig
from shoal.errors import UserError


@pytest.mark.parametrize(
    "spec, needle",
    [
        # int() reads these as worker indices; the grammar is ASCII digits
        ("\u0660/1", "site 0 has '\u0660', not a worker index"),  # an Arabic-Indic zero
        ("+0/1", "site 0 has '+0', not a worker index"),
        ("0/1_0", "site 1 has '1_0', not a worker index"),
        ("a/b", "site 0 has 'a', not a worker index"),
        # an empty item was dropped, while an empty site is refused
        ("0,/1", "site 0 has an empty item"),
        ("0/,1", "site 1 has an empty item"),
        ("0//1", "site 1 of '0//1' names no worker"),
        # a repeated worker is named as such, not as a range of a worker count
        ("0,0/1", "names worker 0 twice"),
        ("0/1,1", "names worker 1 twice"),
        ("0/2", "leaves out worker 1: workers are numbered from 0"),
        ("1/2", "leaves out worker 0"),
    ],
)
def test_a_bad_site_spec_is_one_line_naming_its_fault(spec, needle):
    with pytest.raises(UserError) as err:
        SlowLinkConfig(sites=spec, compress="topk:0.1")
    message = str(err.value)
    assert needle in message and "\n" not in message and message.startswith("--sites")
    assert "0..2" not in message  # no worker count the spec does not know


def test_a_huge_index_is_refused_without_counting_up_to_it():
    with pytest.raises(UserError, match="leaves out worker 1"):
        SlowLinkConfig(sites="0/99999999999999", compress="topk:0.1")


@pytest.mark.parametrize("spec", ["0/1", "1/0", " 0 , 1 / 2", "0,1/3,2", "0"])
def test_good_site_specs_are_taken(spec):
    assert SlowLinkConfig(sites=spec, compress="topk:0.1").sites == spec


@pytest.mark.parametrize(
    "link, flag",
    [
        (SlowLinkConfig(compress="topk:0.1"), "--compress"),
        (SlowLinkConfig(compress="auto"), "--compress"),
        (SlowLinkConfig(local_steps=2), "--local-steps"),
    ],
)
def test_an_adaptive_batch_policy_is_refused_with_a_way_across_the_links(link, flag):
    link.check_batch_policy("fixed", "--batch-policy")  # a fixed batch: fine
    for source in ("--batch-policy", "the job's batch_policy"):
        with pytest.raises(UserError) as err:
            link.check_batch_policy("jabas", source)
        assert str(err.value) == f"{source} jabas is adaptive: {flag} needs a fixed batch size"
    SlowLinkConfig(sites="0/1").check_batch_policy("jabas", "--batch-policy")  # no mode: fine


def test_a_mode_takes_its_settings_defaults_unless_they_are_given():
    """The settings default to None ("not given"), so that one given without its mode is
    refused; the mode resolves them to the defaults their help names."""
    topk = SlowLinkConfig(compress="topk:0.1")
    assert topk.sparse_optim is None and topk.effective_sparse_optim == "lazy"
    dense = SlowLinkConfig(compress="auto", sparse_optim="dense")
    assert dense.effective_sparse_optim == "dense"
    local = SlowLinkConfig(local_steps=2)
    assert (local.outer_lr, local.outer_momentum) == (None, None)
    assert (local.effective_outer_lr, local.effective_outer_momentum) == (0.7, 0.9)
    given = SlowLinkConfig(local_steps=2, outer_lr=0.3, outer_momentum=0.0)  # 0: given
    assert (given.effective_outer_lr, given.effective_outer_momentum) == (0.3, 0.0)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(sparse_optim="lazy"), "--sparse-optim needs --compress"),
        (dict(sparse_optim="dense", compress="none"), "--sparse-optim needs --compress"),
        (dict(outer_lr=0.7), "--outer-lr needs --local-steps"),
        (
            dict(outer_momentum=0.9, compress="blocktopk:0.1"),
            "--outer-momentum needs --local-steps",
        ),
    ],
)
def test_a_setting_without_its_mode_is_refused(fields, message):
    with pytest.raises(UserError) as err:
        SlowLinkConfig(**fields)
    assert str(err.value) == message
