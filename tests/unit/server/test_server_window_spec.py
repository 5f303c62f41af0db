"""Speculative decoding and prefix cache figures over one window (loadgen/server/window_spec.py):
pure, fake edges in each server's spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.server.edges import Edge, counter_delta
from loadgen.server.window import window_figures
from loadgen.server.window_spec import prefix_cache, spec_decode
from tests.support.fake_edges import edge

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def spec_text(p: str, accepted: float, drafts: float, draft_tokens: float) -> str:
    return (f"{p}spec_decode_num_accepted_tokens_total {accepted}\n{p}spec_decode_num_drafts_total {drafts}\n"
            f"{p}spec_decode_num_draft_tokens_total {draft_tokens}\n")


@pytest.mark.parametrize("flavor", ["vllm", "llamacpp"])
def test_accept_length_and_rate_come_from_the_counters_deltas_over_the_window(flavor):
    p = flavor + ":"
    # before the window: 1000 drafts of 3 tokens, 1500 accepted (a warm-up the window must not see)
    a = edge(0.0, spec_text(p, 1500, 1000, 3000))
    # in the window: 200 drafts of 3 tokens, 360 accepted -> 1 + 360/200 = 2.8 tokens per step, 60 %
    b = edge(5.0, spec_text(p, 1860, 1200, 3600))
    assert spec_decode(flavor, a, b) == {"spec_accept_length": pytest.approx(2.8),
                                         "spec_acceptance_rate": pytest.approx(0.6),
                                         "spec_drafts": 200, "spec_source": "counters",
                                         "spec_acceptance_by_position": None}  # no per-position counter here


def test_no_draft_in_the_window_a_restart_or_no_counters_give_none():
    p = "vllm:"
    a = edge(0.0, spec_text(p, 10, 10, 30))
    assert spec_decode("vllm", a, edge(1.0, spec_text(p, 10, 10, 30)))["spec_accept_length"] is None
    assert spec_decode("vllm", a, edge(1.0, spec_text(p, 5, 2, 6)))["spec_accept_length"] is None
    assert spec_decode("vllm", a, edge(1.0, "vllm:generation_tokens_total 5\n"))["spec_source"] is None
    assert spec_decode(None, a, a)["spec_accept_length"] is None


def test_sglang_accept_length_is_its_gauge_at_the_close_edge_averaged_over_ranks():
    a = edge(0.0, "sglang:spec_accept_length 9.0\n")  # the open edge is not used: a gauge of recent batches
    b = edge(1.0, 'sglang:spec_accept_length{dp_rank="0"} 2.5\nsglang:spec_accept_length{dp_rank="1"} 3.5\n'
                  'sglang:spec_accept_rate{dp_rank="0"} 0.5\nsglang:spec_accept_rate{dp_rank="1"} 0.7\n')
    out = spec_decode("sglang", a, b)
    assert out["spec_accept_length"] == pytest.approx(3.0) and out["spec_acceptance_rate"] == pytest.approx(0.6)
    assert out["spec_source"] == "gauge_at_close" and out["spec_drafts"] is None
    assert spec_decode("sglang", a, edge(1.0, "sglang:spec_accept_length 0\n"))["spec_accept_length"] is None


def test_vllm_prefix_hit_rate_is_hits_over_queries_in_the_window():
    a = edge(0.0, "vllm:prefix_cache_queries_total 1000\nvllm:prefix_cache_hits_total 900\n")
    b = edge(1.0, "vllm:prefix_cache_queries_total 1400\nvllm:prefix_cache_hits_total 1000\n")
    assert prefix_cache("vllm", a, b) == {"prefix_cache_hit_rate": pytest.approx(0.25),
                                          "prefix_cache_hit_tokens": 100, "prefix_cache_source": "counters"}


def test_sglang_prefix_hit_rate_from_cached_tokens_summed_over_sources_else_its_gauge():
    a = edge(0.0, 'sglang:prompt_tokens_total 100\nsglang:cached_tokens_total{cache_source="device"} 10\n'
                  'sglang:cached_tokens_total{cache_source="host"} 0\n')
    b = edge(1.0, 'sglang:prompt_tokens_total 300\nsglang:cached_tokens_total{cache_source="device"} 60\n'
                  'sglang:cached_tokens_total{cache_source="host"} 30\n')
    out = prefix_cache("sglang", a, b)
    assert out["prefix_cache_hit_rate"] == pytest.approx(0.4) and out["prefix_cache_hit_tokens"] == 80
    old = prefix_cache("sglang", a, edge(1.0, "sglang:cache_hit_rate 0.3\n"))
    assert old == {"prefix_cache_hit_rate": 0.3, "prefix_cache_hit_tokens": None,
                   "prefix_cache_source": "gauge_at_close"}


def test_llamacpp_prefix_hit_rate_adds_the_cached_tokens_to_the_evaluated_ones():
    fixture = (FIXTURES / "metrics_llamacpp.txt").read_text()  # 66 evaluated, 62 cached: a real server's
    a = edge(0.0, fixture)
    b = edge(2.0, fixture.replace("prompt_tokens_total 66", "prompt_tokens_total 86")
             .replace("prompt_tokens_cached_total 62", "prompt_tokens_cached_total 122"))
    out = prefix_cache("llamacpp", a, b)
    assert out["prefix_cache_hit_tokens"] == 60 and out["prefix_cache_hit_rate"] == pytest.approx(60 / 80)
    # the real server exports the spec counters at 0 without a draft model: no figure, not 1.0
    assert spec_decode("llamacpp", a, b)["spec_accept_length"] is None
    assert window_figures("llamacpp", a, b)["prefix_cache_hit_rate"] == pytest.approx(0.75)


def test_vllms_per_position_acceptance_is_read_over_the_window():
    """vLLM's ``..._num_accepted_tokens_per_pos_total{position}``: Δaccepted at k / Δdrafts, per
    engine summed; 1 + the sum is the accept length (counts from tests/fixtures/vllm/metrics_spec.txt's shape)."""
    name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

    def at(t, drafts, accepted, per_pos):
        return Edge(t, {
            "vllm:spec_decode_num_drafts_total": [({"engine": "0"}, drafts)],
            "vllm:spec_decode_num_draft_tokens_total": [({"engine": "0"}, 3 * drafts)],
            "vllm:spec_decode_num_accepted_tokens_total": [({"engine": "0"}, accepted)],
            name: [({"engine": "0", "position": str(k)}, v) for k, v in enumerate(per_pos)],
        })

    out = spec_decode("vllm", at(0, 10, 5, [3, 1, 1]), at(1, 30, 35, [18, 11, 6]))
    assert out["spec_acceptance_by_position"] == pytest.approx([15 / 20, 10 / 20, 5 / 20])
    assert out["spec_accept_length"] == pytest.approx(1 + sum(out["spec_acceptance_by_position"]))
    no_pos = spec_decode("vllm", at(0, 10, 5, []), at(1, 30, 35, []))
    assert no_pos["spec_acceptance_by_position"] is None and no_pos["spec_accept_length"] == pytest.approx(2.5)


def test_sglang_cached_tokens_counter_missing_at_the_open_started_at_zero():
    """SGLang creates sglang:cached_tokens_total at the first cache hit: absent at the window's
    open (whose read had the server's other metrics) and present at its close is a rise from 0."""
    cached, prompt = "sglang:cached_tokens_total", "sglang:prompt_tokens_total"
    a = edge(0.0, f"{prompt} 1000\nsglang:num_running_reqs 0\n")
    b = edge(5.0, f"{prompt} 3000\n{cached} 500\n")
    out = prefix_cache("sglang", a, b)
    assert (out["prefix_cache_hit_rate"], out["prefix_cache_source"]) == (pytest.approx(500 / 2000), "counters")
    assert out["prefix_cache_hit_tokens"] == 500
    # an open read without SGLang's metrics (nothing read): unknown, not 0
    assert counter_delta(edge(0.0, "other_metric 1\n"), b, cached) is None
    # a counter not known to appear lazily stays unknown
    assert counter_delta(a, edge(5.0, f"{prompt} 3000\nsglang:spec_total 9\n"), "sglang:spec_total") is None
