"""The console line under a stage row for reasoning, tokens per chunk and cached prompt tokens."""

from __future__ import annotations

from loadgen.report.stage_extras import extras_line


def test_a_plain_stage_has_no_line():
    assert extras_line({"index": 0, "tokens_per_chunk": 1.0, "cached_share": None, "ttfat_p50_s": None}) is None
    assert extras_line({"index": 0, "tokens_per_chunk": 1.004}) is None


def test_each_part_only_when_there():
    row = {"index": 2, "ttfat_p50_s": 0.812, "ttfat_p99_s": 0.905, "ttft_p50_s": 0.2,
           "reasoning_tokens_per_request": 20.0, "reasoning_tokens_source": "usage", "answer_decode_tps_p50": 50.0,
           "tokens_per_chunk": 2.29, "cached_share": 0.54}
    assert extras_line(row) == ("llm-loadgen: stage 2: answer after 812 ms p50 (p99 905 ms; TTFT p50 200 ms), "
                                "20.0 reasoning tokens/request (usage), answer 50.0 tok/s p50; 2.29 tokens/chunk; "
                                "54% of prompt tokens cached")
    assert extras_line({"index": 1, "tokens_per_chunk": 1.0, "cached_share": 0.0}) == (
        "llm-loadgen: stage 1: 0% of prompt tokens cached")


def test_the_servers_own_accept_length_and_cache_hit_rate_when_it_reported_them():
    counters = {"spec_accept_length": 2.8, "spec_acceptance_rate": 0.6, "spec_source": "counters",
                "prefix_cache_hit_rate": 0.75, "prefix_cache_source": "counters"}
    assert extras_line({"index": 3, "tokens_per_chunk": 2.8, "server": counters}) == (
        "llm-loadgen: stage 3: 2.80 tokens/chunk; server accept length 2.80, 60% of drafts accepted; "
        "server prefix cache hit 75%")
    gauges = {"spec_accept_length": 3.1, "spec_acceptance_rate": None, "spec_source": "gauge_at_close",
              "prefix_cache_hit_rate": 0.5, "prefix_cache_source": "gauge_at_close"}
    assert extras_line({"index": 0, "server": gauges}) == (
        "llm-loadgen: stage 0: server accept length 3.10 (gauge at the window's close); "
        "server prefix cache hit 50% (gauge at the window's close)")
    none = {"spec_accept_length": None, "prefix_cache_hit_rate": None, "output_tokens_per_s": 100.0}
    assert extras_line({"index": 0, "server": none}) is None
