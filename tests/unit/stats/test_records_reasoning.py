"""RequestRecord on reasoning streams: TTFT is the first token of any kind, the answer timed on its
own (loadgen.stats.answer), reasoning tokens from usage or counted, cached prompt tokens. Fake clock:
every arrival time is given; the SSE bytes are split at every offset."""

from __future__ import annotations

import orjson
import pytest

from loadgen.stats.answer import (
    APPORTIONED,
    STREAM,
    USAGE,
    answer_figures,
    apportioned_reasoning_tokens,
    stream_reasoning_tokens,
)
from loadgen.stats.records import RequestRecord
from loadgen.wire.sse import SSEDecoder

CHAT = "/v1/chat/completions"
SPELLINGS = ("reasoning_content", "reasoning")  # SGLang / vLLM >= 0.19.1


def delta_chunk(delta: dict, finish=None, usage=None) -> bytes:
    chunk = {"id": "x", "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return orjson.dumps(chunk)


def usage(ct: int, reasoning: int | None = None, cached: int | None = None, pt: int = 100) -> dict:
    u = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
    if reasoning is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


def final_usage(ct, reasoning=None, cached=None) -> bytes:
    return orjson.dumps({"id": "x", "choices": [], "usage": usage(ct, reasoning, cached)})


def thinking_stream(key: str, reasoning_usage: int | None, cached: int | None = None):
    """Role delta at 0.05, 3 thinking chunks at 0.1, 0.2, 0.3, then answers at 0.5, 0.6, 0.8."""
    return [
        (delta_chunk({"role": "assistant", "content": ""}), 0.05),
        (delta_chunk({key: "Let"}), 0.1),
        (delta_chunk({key: " me"}), 0.2),
        (delta_chunk({key: " think"}), 0.3),
        (delta_chunk({"content": "The"}), 0.5),
        (delta_chunk({"content": " answer"}), 0.6),
        (delta_chunk({"content": " is", key: None}, finish="length"), 0.8),
        (final_usage(6, reasoning_usage, cached), 0.8),
        (b"[DONE]", 0.8),
    ]


def replay_split(events, sent=0.0, split=1):
    """Feed each event as SSE bytes cut every ``split`` bytes (inside the JSON, between the CR and
    LF...), all pieces of an event arriving at its time ``t``."""
    rec, dec = RequestRecord(sent, 6, CHAT), SSEDecoder()
    for payload, t in events:
        ev = b"data: " + payload + b"\r\n\r\n"
        for i in range(0, len(ev), split):
            for out in dec.feed(ev[i:i + split]):
                rec.on_payload(out, t)
    return rec.finish(events[-1][1], eof=True)


@pytest.mark.parametrize("key", SPELLINGS)
@pytest.mark.parametrize("split", [1, 7, 10_000])
def test_ttft_is_the_first_thinking_token_and_the_answer_is_timed_on_its_own(key, split):
    r = replay_split(thinking_stream(key, reasoning_usage=3), sent=0.0, split=split)
    assert r.ok and r.chunks == 6 and r.completion_tokens == 6
    assert r.ttft_s == pytest.approx(0.1)  # the first thinking token, not the role delta
    assert r.ttfat_s == pytest.approx(0.5)
    assert (r.reasoning_tokens, r.reasoning_source) == (3, USAGE)
    assert r.answer_decode_tps == pytest.approx((3 - 1) / (0.8 - 0.5))
    assert r.decode_tps == pytest.approx((6 - 1) / (0.8 - 0.1))  # the whole output, as before
    assert r.cached_prompt_tokens is None  # no prompt_tokens_details: unknown, not 0


@pytest.mark.parametrize("key", SPELLINGS)
def test_reasoning_counted_from_the_stream_when_usage_has_no_detail(key):
    r = replay_split(thinking_stream(key, reasoning_usage=None), split=5)
    assert (r.reasoning_tokens, r.reasoning_source) == (3, STREAM)
    r = replay_split(thinking_stream(key, reasoning_usage=0), split=5)  # a server that fills 0 in
    assert (r.reasoning_tokens, r.reasoning_source) == (3, STREAM)


def test_cached_prompt_tokens_from_usage_details():
    r = replay_split(thinking_stream("reasoning", reasoning_usage=3, cached=64), split=3)
    assert r.cached_prompt_tokens == 64 and r.prompt_tokens == 100


def test_a_delta_with_both_thinking_and_answer_is_the_first_answer_token():
    ev = [(delta_chunk({"reasoning_content": "hm"}), 0.1),
          (delta_chunk({"reasoning_content": " ok", "content": "Yes"}), 0.3),
          (delta_chunk({"content": "."}, finish="stop"), 0.4), (final_usage(4), 0.4), (b"[DONE]", 0.4)]
    r = replay_split(ev, split=4)
    assert r.ttft_s == pytest.approx(0.1) and r.ttfat_s == pytest.approx(0.3)
    # 4 tokens over 3 chunks, apportioned 1, 1, 2: the 2nd chunk's one token is answer
    assert r.chunks == 3 and (r.reasoning_tokens, r.reasoning_source) == (1, APPORTIONED)


def test_per_chunk_usage_counts_reasoning_tokens_of_multi_token_chunks():
    """Speculative decoding: chunks of several tokens; cumulative usage on every chunk gives each
    chunk's tokens, so the stream count is exact without usage details."""
    ev = [(delta_chunk({"reasoning": "a b c"}, usage=usage(3)), 0.1),
          (delta_chunk({"reasoning": "d e"}, usage=usage(5)), 0.2),
          (delta_chunk({"reasoning": "f", "content": "x y"}, usage=usage(8)), 0.3),
          (delta_chunk({"content": "z"}, finish="length", usage=usage(9)), 0.4), (b"[DONE]", 0.4)]
    r = replay_split(ev, split=9)
    assert (r.reasoning_tokens, r.reasoning_source) == (3 + 2 + 2, STREAM)  # chunk 3: 3 tokens, 1+ answer
    assert r.answer_decode_tps == pytest.approx((9 - 7 - 1) / (0.4 - 0.3))


def test_output_ending_while_thinking_has_no_answer():
    ev = [(delta_chunk({"reasoning_content": "a"}), 0.1),
          (delta_chunk({"reasoning_content": "b"}, finish="length"), 0.2), (final_usage(2, 2), 0.2),
          (b"[DONE]", 0.2)]
    r = replay_split(ev)
    assert r.ok and r.ttft_s == pytest.approx(0.1)
    assert r.ttfat_s is None and r.answer_decode_tps is None and r.reasoning_tokens == 2


def test_completions_and_plain_chat_answer_at_the_first_token():
    rec = RequestRecord(1.0, 3, "/v1/completions")
    for i, t in enumerate((1.2, 1.3, 1.5)):
        rec.on_payload(orjson.dumps({"choices": [{"index": 0, "text": f"w{i}",
                                                  "finish_reason": "length" if i == 2 else None}]}), t)
    rec.on_payload(b"[DONE]", 1.5)
    r = rec.finish(1.5, eof=True)
    assert r.ttfat_s == r.ttft_s == pytest.approx(0.2)
    assert r.answer_decode_tps == r.decode_tps and (r.reasoning_tokens, r.reasoning_source) == (0, None)


def test_answer_figures_formulas():
    a = answer_figures(10.0, 12.0, 14.0, n_tokens=105, usage_reasoning=100, stream_reasoning=7)
    assert (a.ttfat_s, a.reasoning_tokens, a.reasoning_source) == (2.0, 100, USAGE)
    assert a.answer_decode_tps == pytest.approx((5 - 1) / 2.0)
    assert answer_figures(0.0, 1.0, 1.0, 1, None, 0).answer_decode_tps is None  # one answer token
    assert stream_reasoning_tokens(False, None) == 1 and stream_reasoning_tokens(True, None) == 0
    assert stream_reasoning_tokens(True, 4) == 3 and stream_reasoning_tokens(False, 4) == 4


def _result(key, reasoning_usage, cached=None, sent=0.0):
    return replay_split([(p, t + sent) for p, t in thinking_stream(key, reasoning_usage, cached)], sent=sent)


def test_stage_row_reasoning_chunks_and_cache_figures():
    from loadgen.stats.stage_stats import StageStats

    s = StageStats()
    s.add_result(_result("reasoning_content", 3, cached=40), 100, 6)
    s.add_result(_result("reasoning", None, cached=60), 100, 6)
    plain = RequestRecord(0.0, 2, "/v1/completions")  # no reasoning, no cache detail
    plain.on_payload(orjson.dumps({"choices": [{"text": "a b", "finish_reason": "length"}],
                                   "usage": usage(2)}), 0.2)
    s.add_result(plain.finish(0.2, eof=True), 100, 2)
    row = s.row(10.0)
    assert row["ttfat_p50_s"] == pytest.approx(0.5, rel=0.012)  # 0.5, 0.5, 0.2: the median
    assert row["reasoning_tokens_per_request"] == pytest.approx(6 / 3)  # over every ok request
    assert (row["reasoning_tokens"], row["reasoning_tokens_source"]) == (6, "mixed")
    assert row["tokens_per_chunk"] == pytest.approx((6 + 6 + 2) / (6 + 6 + 1))
    # the detail was seen, so the plain request (none: SGLang omits a 0) counts as 0 of its 100 cached
    assert row["cached_prompt_tokens"] == 100 and row["cached_share"] == pytest.approx(100 / 300)


def test_stage_row_of_a_plain_model_shows_no_reasoning_figures():
    from loadgen.stats.stage_stats import StageStats

    s = StageStats()
    rec = RequestRecord(0.0, 2, CHAT)
    for payload, t in [(delta_chunk({"content": "a"}), 0.1), (delta_chunk({"content": "b"}, finish="length"), 0.2),
                       (final_usage(2, reasoning=0), 0.2)]:
        rec.on_payload(payload, t)
    s.add_result(rec.finish(0.2, eof=True), 100, 2)
    row = s.row(10.0)
    assert row["ttft_p50_s"] is not None and s.ttfat_s.count == 1  # the sample is kept (equal to TTFT) ...
    assert row["ttfat_p50_s"] is None and row["answer_decode_tps_p50"] is None  # ... but not shown
    assert row["reasoning_tokens_per_request"] is None and "reasoning_tokens" not in row
    assert row["tokens_per_chunk"] == 1.0


def test_exporter_has_the_answer_histogram_and_the_chunk_and_cache_counters():
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from loadgen.export.exporter import ExporterSnapshot, make_registry
    from loadgen.stats.stage_stats import Collector

    c = Collector()
    c.record_result(_result("reasoning", 3, cached=40), 0, 100, 6)
    snap = ExporterSnapshot(totals=c.totals)
    text = generate_latest(make_registry(type("S", (), {"exporter_snapshot": lambda self: snap})())).decode()
    got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels.get("le")}
    assert got["llm_loadgen_reasoning_tokens_total"] == 3
    assert (got["llm_loadgen_output_chunk_tokens_total"], got["llm_loadgen_output_chunks_total"]) == (6, 6)
    assert got["llm_loadgen_cached_prompt_tokens_total"] == 40
    assert got["llm_loadgen_cache_reported_prompt_tokens_total"] == 100
    assert got["llm_loadgen_time_to_first_answer_token_seconds_count"] == 1
    assert got["llm_loadgen_time_to_first_answer_token_seconds_sum"] == pytest.approx(0.5)


def test_sglang_reports_reasoning_tokens_at_the_top_level_of_usage():
    """SGLang's UsageInfo has ``reasoning_tokens`` beside prompt_tokens, not under
    completion_tokens_details (sglang usage_processor.calculate_token_usage)."""
    events = thinking_stream("reasoning_content", reasoning_usage=None)
    top = orjson.dumps({"id": "x", "choices": [], "usage": {**usage(6), "reasoning_tokens": 3}})
    events[-2] = (top, 0.8)
    # a chunk of two thinking tokens, counted as one from the stream: usage must decide
    events[1] = (delta_chunk({"reasoning_content": "Let us"}), 0.1)
    r = replay_split(events, split=6)
    assert (r.reasoning_tokens, r.reasoning_source) == (3, USAGE)
    from loadgen.stats.answer import usage_reasoning_tokens

    assert usage_reasoning_tokens({"reasoning_tokens": 5, "completion_tokens_details": {"accepted_prediction_tokens": 2}}) == 5
    assert usage_reasoning_tokens({"reasoning_tokens": 0, "completion_tokens_details": {"reasoning_tokens": 4}}) == 4
    assert usage_reasoning_tokens({"reasoning_tokens": 0}) == 0 and usage_reasoning_tokens({}) is None


def _cached_result(pt: int, cached: int | None):
    """A one-chunk completions request whose final usage has ``cached`` (None: no prompt_tokens_details)."""
    rec = RequestRecord(0.0, 1, "/v1/completions")
    u = usage(1, cached=cached, pt=pt)
    rec.on_payload(orjson.dumps({"choices": [{"text": "a", "finish_reason": "length"}], "usage": u}), 0.1)
    return rec.finish(0.1, eof=True)


def test_sglang_omitting_a_zero_cached_count_counts_as_zero_once_the_detail_was_seen():
    """SGLang sends prompt_tokens_details only when cached > 0 (usage_processor._details_if_cached):
    half the requests 90 % cached, half uncached is a 45 % share, not 90 %."""
    from loadgen.stats.stage_stats import StageStats

    s = StageStats()
    for _ in range(5):
        s.add_result(_cached_result(100, 90), 100, 1)
        s.add_result(_cached_result(100, None), 100, 1)
    assert s.row(10.0)["cached_share"] == pytest.approx(0.45)
    vllm = StageStats()  # vLLM sends cached_tokens 0: the same figure
    for _ in range(5):
        vllm.add_result(_cached_result(100, 90), 100, 1)
        vllm.add_result(_cached_result(100, 0), 100, 1)
    assert vllm.row(10.0)["cached_share"] == pytest.approx(0.45)
    never = StageStats()  # the detail never seen: unknown, not 0
    never.add_result(_cached_result(100, None), 100, 1)
    assert never.row(10.0)["cached_share"] is None and never.row(10.0)["cached_prompt_tokens"] is None


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_cached_share_merges_exactly_when_one_worker_never_saw_the_detail(order):
    """Worker A's requests all lacked the detail (uncached, SGLang), worker B's had it: merged
    through the wire, A's prompt tokens count as 0 cached, as if one process had seen them all."""
    from loadgen.stats.stage_stats import Collector, StageStats

    a, b = StageStats(), StageStats()
    for _ in range(3):
        a.add_result(_cached_result(200, None), 200, 1)
        b.add_result(_cached_result(100, 80), 100, 1)
    assert a.row(10.0)["cached_share"] is None  # alone, A cannot know
    master = Collector()
    workers = (a, b)
    for i in order:
        master.merge_delta({"totals": StageStats().to_message(), "stages": [[0, workers[i].to_message()]]})
    merged = master.stages[0].row(10.0)
    assert merged["cached_share"] == pytest.approx(3 * 80 / (3 * 100 + 3 * 200))
    one = StageStats()
    for _ in range(3):
        one.add_result(_cached_result(200, None), 200, 1)
        one.add_result(_cached_result(100, 80), 100, 1)
    assert merged["cached_share"] == one.row(10.0)["cached_share"]


def test_no_cache_warning_when_the_detail_was_seen_on_some_requests():
    from loadgen.run.cache_report import missing_cache_detail, prefix_sharing
    from loadgen.stats.stage_stats import StageStats

    s = StageStats()
    s.add_result(_cached_result(100, None), 100, 1)
    s.add_result(_cached_result(100, 64), 100, 1)
    row = {"index": 0, **s.row(10.0)}
    assert missing_cache_detail(row, prefix_sharing(3, 0, False)) is None


@pytest.mark.parametrize("key", SPELLINGS)
def test_multi_token_chunks_with_only_a_final_usage_total_apportion_the_reasoning_tokens(key):
    """Speculative decoding, usage only at the end (no per-chunk usage, no reasoning_tokens): 3 tokens
    a chunk, 2 thinking chunks then 2 answer chunks. Counting one token per thinking chunk gave R = 2,
    A = 10 and an answer decode rate of 9 / 0.1 s; the usage total spread over the chunks gives R = 6."""
    ev = [(delta_chunk({key: "a b c"}), 0.1), (delta_chunk({key: "d e f"}), 0.2),
          (delta_chunk({"content": "x y z"}), 0.3), (delta_chunk({"content": "u v w"}, finish="length"), 0.4),
          (final_usage(12), 0.4), (b"[DONE]", 0.4)]
    r = replay_split(ev, split=11)
    assert (r.reasoning_tokens, r.reasoning_source) == (6, APPORTIONED)
    assert r.answer_decode_tps == pytest.approx((12 - 6 - 1) / (0.4 - 0.3))
    with_usage = ev[:4] + [(final_usage(12, reasoning=7), 0.4), (b"[DONE]", 0.4)]
    assert (replay_split(with_usage).reasoning_tokens, replay_split(with_usage).reasoning_source) == (7, USAGE)


def test_apportioned_reasoning_tokens_formula():
    # N = 10 over C = 4 chunks: 2, 3, 2, 3 tokens; chunks 0 and 1 thinking, chunk 2 crossing
    assert apportioned_reasoning_tokens(10, 4, [0, 2]) == 2 + 3
    assert apportioned_reasoning_tokens(10, 4, [0, 2, 2 * 2 + 1]) == 2 + 3 + (2 - 1)
    assert apportioned_reasoning_tokens(3, 4, [1]) == 0  # a chunk apportioned 0 tokens, answer in it


def test_both_reasoning_delta_spellings_are_read():
    """vLLM's newest versions stream thinking as delta.reasoning (renamed from reasoning_content),
    SGLang keeps delta.reasoning_content; either may share a delta with the answer's content."""
    from loadgen.stats.answer import delta_parts

    assert delta_parts({"reasoning": "hm"}) == ("hm", None)  # vLLM >= 0.19.1
    assert delta_parts({"reasoning_content": "hm"}) == ("hm", None)  # SGLang
    assert delta_parts({"reasoning": "a", "content": "b"}) == ("a", "b")
    assert delta_parts({"reasoning_content": None, "reasoning": "a"}) == ("a", None)
    assert delta_parts({"content": "b"}) == (None, "b") and delta_parts({"role": "assistant"}) == (None, None)
