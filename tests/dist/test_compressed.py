"""Compressed training across sites (issue 15): a kill leaves the digest of the same
micro-batch-to-site assignment unchanged, and compression does change the result."""

import pytest

from shoal_testing import shoal_run

pytestmark = pytest.mark.dist
DENSE_30 = "f3859b268b1fcf92f4b59402ab968f02878b23ebae60d0baedfe735b4b8179b5"  # any layout
# M = 4 micro-batches, at most 2 per worker: 3 workers split 2/1/1 and 2 workers 2/2, so
# site 0 (w0) computes micro-batches 0-1 and site 1 computes 2-3 before and after the kill
COMPRESSED = ["--compress", "blocktopk:0.1", "--max-micro-batches", "2"]


def test_a_kill_in_a_site_keeps_the_digest_of_the_same_site_assignment(tmp_path):
    # w1 leads site 1 and dies; w2, which computed the same residuals, carries on alone
    killed = shoal_run(
        tmp_path / "killed",
        "v100,k80,k80",
        30,
        *COMPRESSED,
        "--sites",
        "0/1,2",
        "--events",
        "step 8: kill 1",
    )
    plain = shoal_run(tmp_path / "plain", "v100,k80", 30, *COMPRESSED, "--sites", "0/1")
    assert killed["state_sha256"] == plain["state_sha256"]
    assert plain["state_sha256"] != DENSE_30  # compression changed what was applied
