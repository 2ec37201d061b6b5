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
