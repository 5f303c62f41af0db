"""The server's latency histograms over a window (loadgen/server/window_latency.py): fake edges."""

from __future__ import annotations

import math

import pytest

from loadgen.server.window import window_figures
from loadgen.server.window_latency import histogram_delta, histogram_quantile, latency, quantile_and_bucket
from loadgen.server.window_spec import prefix_cache, spec_decode
from tests.support.fake_edges import edge, hist_text

TTFT = "vllm:time_to_first_token_seconds"


def test_histogram_quantile_interpolates_linearly_within_the_bucket_like_prometheus():
    b = [(0.1, 10.0), (0.2, 30.0), (0.4, 40.0), (math.inf, 40.0)]
    # rank 20 of 40 is half-way through the (0.1, 0.2] bucket's 20 samples
    assert histogram_quantile(0.5, b) == pytest.approx(0.15)
    # rank 5: half of the first bucket, lower bound 0
    assert histogram_quantile(0.125, b) == pytest.approx(0.05)
    assert histogram_quantile(0.99, b) == pytest.approx(0.2 + 0.2 * (39.6 - 30) / 10)
    # a rank in +Inf gives the largest finite bound; no samples gives None
    assert histogram_quantile(0.99, [(0.1, 1.0), (math.inf, 10.0)]) == 0.1
    assert quantile_and_bucket(0.99, [(0.1, 1.0), (math.inf, 10.0)]) == (0.1, None)  # no bound above
    assert quantile_and_bucket(0.5, b) == (pytest.approx(0.15), pytest.approx(0.1))
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None


def test_the_delta_over_the_window_drops_what_came_before_it():
    before = hist_text(TTFT, {"0.1": 100, "0.2": 100, "+Inf": 100}, 5.0)  # 100 fast requests earlier
    after = hist_text(TTFT, {"0.1": 100, "0.2": 120, "+Inf": 120}, 8.0)  # 20 in (0.1, 0.2] in the window
    d = histogram_delta(edge(0, before), edge(10, after), TTFT)
    assert d["count"] == 20 and d["mean_s"] == pytest.approx(3.0 / 20)
    assert d["p50_s"] == pytest.approx(0.15)  # all of the window's samples are in (0.1, 0.2]
    assert d["p99_s"] == pytest.approx(0.1 + 0.1 * 0.99)
    assert d["p50_bucket_s"] == pytest.approx(0.1)  # the error bound: the bucket's width


def test_label_sets_are_summed_and_named_and_a_restart_gives_none():
    a = edge(0, hist_text(TTFT, {"0.1": 0, "+Inf": 0}, 0, 'engine="0"'),
             hist_text(TTFT, {"0.1": 0, "+Inf": 0}, 0, 'engine="1"'))
    b = edge(1, hist_text(TTFT, {"0.1": 10, "+Inf": 10}, 0.5, 'engine="0"'),
             hist_text(TTFT, {"0.1": 0, "+Inf": 30}, 30.0, 'engine="1"'))
    out = latency("vllm", a, b)
    assert out["ttft"]["count"] == 40 and out["ttft"]["mean_s"] == pytest.approx(30.5 / 40)
    assert out["latency_labels"] == "engine"
    assert out["queue"] is None and out["ttft"]["metric"] == TTFT
    assert latency("vllm", b, a) == {}  # counts went down: the server restarted


def test_the_older_vllm_itl_name_and_sglang_queue_time_are_read():
    old = "vllm:time_per_output_token_seconds"
    a, b = edge(0, hist_text(old, {"0.01": 0, "+Inf": 0}, 0)), edge(1, hist_text(old, {"0.01": 4, "+Inf": 4}, 0.02))
    assert latency("vllm", a, b)["itl"]["mean_s"] == pytest.approx(0.005)
    q = "sglang:queue_time_seconds"
    a, b = edge(0, hist_text(q, {"1": 0, "+Inf": 0}, 0)), edge(1, hist_text(q, {"1": 2, "+Inf": 2}, 1.0))
    out = latency("sglang", a, b)
    assert out["queue"]["mean_s"] == 0.5 and out["ttft"] is None and "prefill" not in out


def test_llamacpp_counters_give_means_per_token_only():
    a = edge(0, "llamacpp:prompt_seconds_total 1\nllamacpp:prompt_tokens_total 100\n"
                "llamacpp:tokens_predicted_seconds_total 2\nllamacpp:tokens_predicted_total 100\n")
    b = edge(5, "llamacpp:prompt_seconds_total 2\nllamacpp:prompt_tokens_total 1100\n"
                "llamacpp:tokens_predicted_seconds_total 4\nllamacpp:tokens_predicted_total 300\n")
    out = latency("llamacpp", a, b)
    assert out == {"prompt_per_token": {"count": 1000, "mean_s": 0.001},
                   "decode_per_token": {"count": 200, "mean_s": 0.01}}


def test_a_server_without_latency_figures_adds_nothing_to_the_stage():
    a, b = edge(0, "x_total 1\n"), edge(1, "x_total 2\n")
    assert latency(None, a, b) == {} and latency("openai", a, b) == {}
    others = set(spec_decode(None, a, b)) | set(prefix_cache(None, a, b))  # the other readers' keys
    assert set(window_figures(None, a, b)) == {"output_tokens", "output_tokens_per_s"} | others
