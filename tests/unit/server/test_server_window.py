"""What the server's counters say about one window (loadgen/server/window.py): pure, fake edges."""

from __future__ import annotations

from loadgen.server.window import counter_delta, generation, window_figures
from tests.support.fake_edges import edge

GEN = "vllm:generation_tokens_total"


def test_a_counter_over_the_window_is_summed_over_label_sets():
    a = edge(10.0, f'{GEN}{{engine="0"}} 100\n{GEN}{{engine="1"}} 50\n')
    b = edge(12.0, f'{GEN}{{engine="0"}} 400\n{GEN}{{engine="1"}} 250\n')
    assert counter_delta(a, b, GEN) == 500
    assert generation("vllm", a, b) == {"output_tokens": 500, "output_tokens_per_s": 250.0}


def test_a_restart_a_missing_edge_or_series_gives_none_never_a_negative():
    a, b = edge(10.0, f"{GEN} 900\n"), edge(12.0, f"{GEN} 40\n")
    assert counter_delta(a, b, GEN) is None  # went down: the server restarted in the window
    assert counter_delta(None, b, GEN) is None and counter_delta(a, None, GEN) is None
    assert counter_delta(a, b, "vllm:other_total") is None and counter_delta(a, b, None) is None
    assert generation("vllm", a, b) == {"output_tokens": None, "output_tokens_per_s": None}
    assert generation("openai", edge(1, f"{GEN} 1\n"), edge(2, f"{GEN} 9\n"))["output_tokens"] is None


def test_window_figures_merge_every_reader():
    a, b = edge(0.0, "llamacpp:tokens_predicted_total 10\n"), edge(0.5, "llamacpp:tokens_predicted_total 60\n")
    figures = window_figures("llamacpp", a, b)
    assert {k: figures[k] for k in ("output_tokens", "output_tokens_per_s")} == {"output_tokens": 50,
                                                                                 "output_tokens_per_s": 100.0}
    assert figures["spec_accept_length"] is None and figures["prefix_cache_hit_rate"] is None  # not exported


def test_a_restart_told_by_process_start_time_counts_from_zero_and_says_so():
    """The new process's counter (1200) already passed the old one's (900): without the start time
    the delta looked like a silently small 300; with it, the counters restarted, delta = 1200."""
    start = "process_start_time_seconds"
    a = edge(10.0, f"{start} 1000.0\n{GEN} 900\n")
    b = edge(12.0, f"{start} 1011.0\n{GEN} 1200\n")
    figures = window_figures("vllm", a, b)
    assert figures["output_tokens"] == 1200 and figures["server_restarted"] is True
    same = window_figures("vllm", a, edge(12.0, f"{start} 1000.0\n{GEN} 1200\n"))
    assert same["output_tokens"] == 300 and "server_restarted" not in same
    # no start time at an edge: as before (a rise, or None when the counter went down)
    assert "server_restarted" not in window_figures("vllm", edge(10.0, f"{GEN} 900\n"), b)


def test_a_restart_resets_the_latency_histograms_too():
    from tests.support.fake_edges import hist_text

    start, ttft = "process_start_time_seconds", "vllm:time_to_first_token_seconds"
    a = edge(0.0, f"{start} 5.0\n", hist_text(ttft, {"0.1": 50, "+Inf": 60}, 9.0))
    b = edge(9.0, f"{start} 7.0\n", hist_text(ttft, {"0.1": 70, "+Inf": 80}, 12.0))
    figures = window_figures("vllm", a, b)
    assert figures["ttft"]["count"] == 80 and figures["ttft"]["mean_s"] == 12.0 / 80
