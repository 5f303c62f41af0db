"""What the server's counters say about one window (loadgen/server/window.py): pure, fake edges."""

from __future__ import annotations

from loadgen.server.window import counter_delta, generation, window_figures
from tests.fake_edges import edge

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
