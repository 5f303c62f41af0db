"""Where the time goes (loadgen/analysis/breakdown.py): client and server clocks side by side, pure."""

from __future__ import annotations

import pytest

from loadgen.analysis.breakdown import (
    breakdown,
    clock_lines,
    diagnosis,
    disagreement,
    off_reason,
    populations_agree,
    stack,
)


def part(mean: float, p50: float | None = None, count: int = 100) -> dict:
    return {"count": count, "mean_s": mean, "p50_s": p50, "p90_s": None, "p99_s": None,
            "p50_bucket_s": None if p50 is None else 0.05}


def client(ttft: float, e2e: float, itl: float, itl_chunk: float | None = None, count: int = 100) -> dict:
    """The client's figures; ``itl`` per token, ``itl_chunk`` per chunk (default: one token a chunk);
    ``count`` requests (the server's fake parts count 100)."""
    chunk = itl if itl_chunk is None else itl_chunk
    return {"ttft": {"count": count, "mean_s": ttft, "p50_s": ttft, "p90_s": None, "p99_s": None},
            "e2e": {"mean_s": e2e, "p50_s": e2e, "p90_s": None, "p99_s": None},
            "itl": {"mean_s": itl, "p50_s": itl, "p90_s": None, "p99_s": None},
            "itl_chunk": {"mean_s": chunk, "p50_s": chunk, "p90_s": None, "p99_s": None}}


def vllm_server(queue: float, prefill: float = 0.1, decode: float = 2.0, other: float = 0.01) -> dict:
    ttft = queue + prefill + other
    return {"flavor": "vllm", "ttft": part(ttft, ttft), "queue": part(queue), "prefill": part(prefill),
            "decode": part(decode), "e2e": part(ttft + decode), "itl": part(0.02, 0.02)}


def row(index: int, c: int, cl: dict, server: dict, flags=(), lag: float = 0.001) -> dict:
    r = {"index": index, "concurrency": c, "server": server, "flags": list(flags),
         "client": {"cpu_percent": 20.0, "loop_lag_p99_s": lag}}
    r["breakdown"] = breakdown(cl, server)
    return r


def test_the_means_add_up_to_the_clients_and_the_rest_is_network_and_client():
    b = breakdown(client(0.33, 2.34, 0.021), vllm_server(0.2))
    ttft = b["ttft"]
    assert ttft["queue_mean_s"] == 0.2 and ttft["prefill_mean_s"] == 0.1
    assert ttft["server_rest_mean_s"] == pytest.approx(0.01)
    assert ttft["network_client_mean_s"] == pytest.approx(0.02)
    assert sum(v for _, v in stack(ttft)) == pytest.approx(0.33)
    assert sum(v for _, v in stack(b["e2e"])) == pytest.approx(2.34)
    assert [p for p, _ in stack(b["e2e"])] == ["queue", "prefill", "decode", "server_rest", "network_client"]
    assert b["itl"]["network_client_mean_s"] == pytest.approx(0.001) and b["itl"]["network_client_p50_s"] == pytest.approx(0.001)
    assert b["ttft"]["server_p50_bucket_s"] == 0.05  # the server percentile's error bound, carried along
    assert breakdown(client(0.3, 2, 0.02), {"flavor": None}) is None and breakdown(client(0.3, 2, 0.02), None) is None


def test_sglang_has_no_prefill_histogram_so_the_rest_holds_prefill():
    server = {"ttft": part(0.5), "queue": part(0.3), "e2e": part(3.0)}
    b = breakdown(client(0.55, 3.05, 0.02), server)
    assert b["ttft"]["prefill_mean_s"] is None and b["ttft"]["server_rest_mean_s"] == pytest.approx(0.2)
    assert [p for p, _ in stack(b["ttft"])] == ["queue", "server_rest", "network_client"]
    assert "itl" not in b


def test_the_verdict_names_queue_time_when_it_dominates_the_growth():
    a = row(0, 64, client(0.33, 2.34, 0.021), vllm_server(0.2))
    b = row(1, 128, client(2.13, 4.14, 0.021), vllm_server(1.9, prefill=0.2))  # +1.8 s: +1.7 queue, +0.1 prefill
    line = diagnosis(a, b)
    assert line.startswith("C=128: TTFT mean +1.8 s (p50 +1.8 s), 94% of it server queue time")
    # growth spread over parts: no part dominates, no diagnosis
    c = row(2, 256, client(3.13, 5.14, 0.021), vllm_server(2.4, prefill=0.7))
    assert diagnosis(b, c) is None
    assert diagnosis(None, b) is None


def test_a_constant_network_delay_is_flagged_as_network_not_client():
    r = row(0, 8, client(0.43, 2.44, 0.0201), vllm_server(0.2))  # 120 ms over the server on TTFT only
    gap = disagreement(r)
    assert gap["gap_s"] == pytest.approx(0.12) and "network or a proxy" in gap["likely_cause"]
    assert "client TTFT mean - server TTFT mean" in gap["compared"]
    assert disagreement(row(0, 8, client(0.34, 2.35, 0.02), vllm_server(0.2))) is None  # 30 ms: allowed
    # the client's loop lag explains it
    assert disagreement(row(0, 8, client(0.43, 2.44, 0.02), vllm_server(0.2), lag=0.1)) is None
    bound = row(0, 8, client(0.43, 2.44, 0.02), vllm_server(0.2), flags=["client_bound"])
    assert disagreement(bound)["likely_cause"].startswith("client_bound")
    late_tokens = row(0, 8, client(0.43, 2.44, 0.04), vllm_server(0.2))  # every token late too
    assert "buffering the stream" in disagreement(late_tokens)["likely_cause"]


def test_one_line_says_why_the_breakdown_is_off_and_the_flagged_stage_says_why():
    plain = {"index": 0, "concurrency": 1, "flags": []}
    assert "no server watch" in off_reason(plain)
    assert "off (cannot connect" in off_reason({**plain, "server": {"disabled": "cannot connect (x)"}})
    assert "llama.cpp" in off_reason({**plain, "server": {"flavor": "llamacpp", "prompt_per_token": part(0.001)}})
    lines = clock_lines([plain])
    assert len(lines) == 1 and lines[0].startswith("llm-loadgen: client/server time breakdown off: ")
    assert clock_lines([plain, {**plain, "index": 1}]) == []  # said once, under the first row
    a = row(0, 64, client(0.33, 2.34, 0.021), vllm_server(0.2))
    b = row(1, 128, client(2.13, 4.14, 0.021), vllm_server(1.9, prefill=0.2))
    assert clock_lines([a, b]) == ["llm-loadgen: stage 1 " + b["breakdown"]["diagnosis"]]


def test_llamacpp_decode_seconds_per_token_stand_for_the_servers_itl_mean():
    server = {"flavor": "llamacpp", "prompt_per_token": {"count": 1000, "mean_s": 0.001},
              "decode_per_token": {"count": 200, "mean_s": 0.01}}
    b = breakdown(client(0.3, 2.0, 0.0105), server)
    assert set(b) == {"itl"} and b["itl"]["network_client_mean_s"] == pytest.approx(0.0005)
    assert b["itl"]["server_p50_s"] is None


def test_vllm_itl_under_speculative_decoding_is_compared_per_chunk_and_sglang_per_token():
    """vLLM records one ITL sample per engine step per request, whatever the tokens the step emitted;
    with 3 tokens a step the client's per-token ITL (10 ms) is a third of the server's per-step 30 ms,
    so only its per-chunk gap (31 ms) compares. SGLang divides a gap by the chunk's tokens."""
    server = vllm_server(0.2)
    server["itl"] = part(0.030, 0.030)
    b = breakdown(client(0.33, 2.34, 0.0103, itl_chunk=0.031), server)
    assert b["itl"]["client_itl"] == "per_chunk" and b["itl"]["client_mean_s"] == 0.031
    assert b["itl"]["network_client_mean_s"] == pytest.approx(0.001)
    sglang = {"flavor": "sglang", "ttft": part(0.3), "itl": part(0.010, 0.010)}
    b = breakdown(client(0.33, 2.34, 0.0103, itl_chunk=0.031), sglang)
    assert b["itl"]["client_itl"] == "per_token" and b["itl"]["network_client_mean_s"] == pytest.approx(0.0003)


def test_a_proxy_buffering_the_stream_is_seen_on_vllm_under_speculative_decoding():
    """TTFT 120 ms late and every chunk 12 ms late (a buffering proxy), 3 tokens a step: compared per
    token (13 ms vs the server's 30 ms a step) the client looked early and the cause was missed."""
    server = vllm_server(0.2)
    server["itl"] = part(0.030, 0.030)
    r = row(0, 8, client(0.43, 2.44, 0.014, itl_chunk=0.042), server)
    assert "buffering the stream" in disagreement(r)["likely_cause"]
    prev = row(0, 4, client(0.33, 2.34, 0.010, itl_chunk=0.030), server)
    slower = vllm_server(0.2)
    slower["itl"] = part(0.060, 0.060)
    line = diagnosis(prev, row(1, 8, client(0.33, 2.34, 0.020, itl_chunk=0.060), slower))
    assert line is not None and "ITL per chunk mean" in line


def test_clocks_disagree_only_when_both_windows_hold_about_the_same_requests():
    """vLLM observes TTFT at the first token, the rest at the finish, from every client; the client's
    stage holds the requests it sent in the window. A 120 ms gap over 100 server first tokens and
    60 client requests compares different requests: said, not flagged."""
    same = row(0, 8, client(0.43, 2.44, 0.0201, count=95), vllm_server(0.2))
    gap = disagreement(same)
    assert gap["populations"] == "agree" and (gap["server_count"], gap["client_count"]) == (100, 95)
    assert "network or a proxy" in gap["likely_cause"]
    other = row(0, 8, client(0.43, 2.44, 0.0201, count=60), vllm_server(0.2))
    gap = disagreement(other)
    assert gap["populations"] == "differ" and "different requests" in gap["likely_cause"]
    other["breakdown"]["disagreement"] = gap
    (line,) = clock_lines([{**other, "server": {"flavor": "vllm", "ttft": part(0.21)}}])
    assert "not flagged: the populations differ (server 100 first tokens over the window, client 60" in line


def test_population_tolerance():
    assert populations_agree(100, 90) and not populations_agree(100, 89)  # 10 % of the larger
    assert populations_agree(3, 1) and not populations_agree(4, 1)  # at least 2 apart allowed
    assert populations_agree(None, 5) is None


def test_the_stage_is_flagged_only_when_the_populations_agree():
    from loadgen.run.results import GuardLog, StageInfo, stage_row
    from loadgen.stats.stage_stats import StageStats

    late = StageStats()
    for _ in range(10):
        late.ttft_s.add(0.5)  # 400 ms after the server's clock
    client_row = {"cpu_percent": 20.0, "loop_lag_p99_s": 0.001}

    def flags(server_count: int) -> list[str]:
        server = {"flavor": "vllm", "ttft": {"count": server_count, "mean_s": 0.1, "p50_s": 0.1, "p90_s": 0.1,
                                             "p99_s": 0.1}}
        return stage_row(StageInfo(0, 1, window_s=10.0, users=1, server=server), late, GuardLog(), client_row,
                         False)["flags"]

    assert "clocks_disagree" in flags(11)
    assert "clocks_disagree" not in flags(40)  # the server timed 40 first tokens: other requests too
