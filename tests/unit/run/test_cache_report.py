"""The stage warning for a workload that shares prefixes on a server that reports no cache detail."""

from __future__ import annotations

from loadgen.run.cache_report import missing_cache_detail, prefix_sharing
from loadgen.run.results import stage_warnings


def row(cached_share, requests=5):
    return {"index": 2, "requests": requests, "cached_share": cached_share, "flags": [], "token_mismatch": {}}


def test_which_workloads_share_prefixes():
    assert prefix_sharing(1, 0, False) is None
    assert "4-turn" in prefix_sharing(4, 0, False)
    assert "hash_ids" in prefix_sharing(1, 0, True)
    assert "128 tokens" in prefix_sharing(1, 128, False)


def test_warning_names_both_server_flags_only_when_the_detail_is_missing():
    sharing = prefix_sharing(3, 0, False)
    line = missing_cache_detail(row(None), sharing)
    assert "stage 2" in line and "--enable-prompt-tokens-details" in line and "--enable-cache-report" in line
    assert missing_cache_detail(row(0.4), sharing) is None  # reported (even 0 % would be a number)
    assert missing_cache_detail(row(None), None) is None  # nothing shared: nothing to expect
    assert missing_cache_detail(row(None, requests=0), sharing) is None  # no ok request: nothing to say
    assert line in stage_warnings(row(None), 10, 10, sharing)
    assert not any("cached" in w for w in stage_warnings(row(None), 10, 10))
