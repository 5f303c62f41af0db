"""RequestRecord: every stream shape we meet, the failure kinds, and known-answer metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from loadgen.errors import (
    ABORTED,
    CONNECTION_RESET,
    EMPTY_STREAM,
    MALFORMED_CHUNK,
    NOT_OPENAI,
    READ_TIMEOUT,
    STREAM_ERROR,
    TRUNCATED,
    RequestError,
    is_client_refusal,
)
from loadgen.stats.records import MAX_MESSAGE_CHARS, RequestRecord
from loadgen.wire.sse import SSEDecoder

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat(content=None, *, role=None, finish=None, usage="absent", key="content", **extra):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta[key] = content
    chunk = {"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    if usage != "absent":
        chunk["usage"] = usage
    chunk.update(extra)
    return orjson.dumps(chunk)


def completion(text, *, finish=None, usage="absent"):
    chunk = {
        "id": "x",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    if usage != "absent":
        chunk["usage"] = usage
    return orjson.dumps(chunk)


def usage(completion_tokens, prompt_tokens=100):
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip


def usage_chunk(completion_tokens, prompt_tokens=100):
    return orjson.dumps({"id": "x", "choices": [], "usage": usage(completion_tokens, prompt_tokens)})


def run(events, sent=0.0, t_end=None, eof=True, endpoint=CHAT, error=None):
    """Feed (payload, t) pairs; return the finished result."""
    rec = RequestRecord(sent, 0, endpoint)
    for payload, t in events:
        rec.on_payload(payload, t)
    return rec.finish(t_end if t_end is not None else (events[-1][1] if events else sent), eof, error)


def vllm_chat(n_chunks, *, ttft=0.2, gap=0.02, tokens_per_chunk=1, per_chunk_usage=False, final_usage=True):
    """vLLM-shaped chat stream: role delta, content chunks, finish chunk, usage chunk, [DONE]."""
    ev = [(chat("", role="assistant", usage=usage(0) if per_chunk_usage else "absent"), 0.05)]
    for i in range(n_chunks):
        u = usage((i + 1) * tokens_per_chunk) if per_chunk_usage else "absent"
        ev.append((chat("tok" * tokens_per_chunk, usage=u), ttft + i * gap))
    t_last = ttft + (n_chunks - 1) * gap
    ev.append((chat("", finish="length"), t_last + 0.001))
    if final_usage:
        ev.append((usage_chunk(n_chunks * tokens_per_chunk), t_last + 0.002))
    ev.append((b"[DONE]", t_last + 0.003))
    return ev


def test_known_answer_one_token_per_chunk():
    r = run(vllm_chat(100))
    assert r.ok and r.error_kind is None and r.finish_reason == "length"
    assert r.chunks == 100 and r.completion_tokens == 100 and r.prompt_tokens == 100
    assert not r.tokens_estimated
    assert r.ttft_s == pytest.approx(0.2)
    assert r.e2e_s == pytest.approx(0.2 + 99 * 0.02)
    assert np.allclose(r.itl_token_s, 0.02) and len(r.itl_token_s) == 99
    assert np.array_equal(r.itl_token_w, np.ones(99))
    assert r.itl_token_s is r.itl_chunk_s  # the documented sharing stats relies on
    assert np.allclose(r.itl_chunk_s, 0.02) and len(r.itl_chunk_s) == 99
    assert r.tpot_s == pytest.approx(0.02)
    assert r.decode_tps == pytest.approx(50.0)


@pytest.mark.parametrize("per_chunk_usage", [True, False])
def test_known_answer_four_tokens_per_chunk(per_chunk_usage):
    r = run(vllm_chat(50, gap=0.08, tokens_per_chunk=4, per_chunk_usage=per_chunk_usage))
    assert r.ok and r.completion_tokens == 200 and r.chunks == 50
    assert np.allclose(r.itl_token_s, 0.02) and np.array_equal(r.itl_token_w, np.full(49, 4))
    assert np.allclose(r.itl_chunk_s, 0.08)
    assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 199)
    assert r.tpot_s == pytest.approx(49 * 0.08 / 199)
    assert r.decode_tps == pytest.approx(199 / (49 * 0.08))


def test_speculative_chunks_with_per_chunk_usage_give_exact_tokens():
    tokens = [1, 3, 2, 4, 1]
    times = [0.1, 0.13, 0.15, 0.19, 0.2]
    ev, total = [], 0
    for n, t in zip(tokens, times, strict=True):
        total += n
        ev.append((chat("x" * n, usage=usage(total)), t))
    ev.append((chat("", finish="stop", usage=usage(total)), 0.21))
    r = run(ev)
    assert r.ok and r.completion_tokens == 11
    assert np.array_equal(r.itl_token_w, [3, 2, 4, 1])
    assert np.allclose(r.itl_token_s, [0.03 / 3, 0.02 / 2, 0.04 / 4, 0.01 / 1])
    assert np.allclose(r.itl_chunk_s, [0.03, 0.02, 0.04, 0.01])


def test_even_spreading_of_final_usage_over_uneven_chunks():
    ev = [
        (completion("ab"), 1.0),
        (completion("cde"), 1.3),
        (completion("fg"), 1.5),
        (completion("hij"), 1.8),
    ]
    ev += [(completion("", finish="length"), 1.8), (usage_chunk(10), 1.8), (b"[DONE]", 1.8)]
    r = run(ev, sent=0.5, endpoint=COMPLETIONS)
    # N=10 over C=4 chunks: floor((i+1)*10/4) - floor(i*10/4) = [2, 3, 2, 3]
    assert np.array_equal(r.itl_token_w, [3, 2, 3])
    assert np.allclose(r.itl_token_s, [0.3 / 3, 0.2 / 2, 0.3 / 3])
    assert r.ttft_s == pytest.approx(0.5) and r.e2e_s == pytest.approx(1.3)


def test_sglang_usage_null_on_chunks_final_usage_chunk_and_reasoning_content():
    ev = [(chat("", role="assistant", usage=None), 0.1)]
    ev += [
        (chat("think", key="reasoning_content", usage=None), 0.2),
        (chat("more", key="reasoning_content", usage=None), 0.3),
    ]
    ev += [(chat("answer", usage=None), 0.4), (chat(None, finish="stop", usage=None), 0.41)]
    ev += [(usage_chunk(3, prompt_tokens=7), 0.42), (b"[DONE]", 0.43)]
    r = run(ev)
    assert r.ok and r.chunks == 3 and r.completion_tokens == 3 and r.prompt_tokens == 7
    assert r.ttft_s == pytest.approx(0.2) and r.e2e_s == pytest.approx(0.4)


def test_vllm_reasoning_field_counts_as_tokens():
    ev = [(chat("", role="assistant"), 0.1), (chat("hmm", key="reasoning"), 0.25), (chat("ok"), 0.3)]
    ev += [(chat("", finish="stop"), 0.3), (b"[DONE]", 0.31)]
    r = run(ev)
    assert r.ok and r.chunks == 2 and r.ttft_s == pytest.approx(0.25)


def test_role_only_delta_does_not_set_ttft():
    ev = [(chat(None, role="assistant"), 0.01), (chat("", role="assistant"), 0.02), (chat("hi"), 0.5)]
    ev += [(chat("!"), 0.6), (chat(None, finish="stop"), 0.6), (b"[DONE]", 0.61)]
    r = run(ev)
    assert r.ok and r.ttft_s == pytest.approx(0.5) and r.chunks == 2


@pytest.mark.parametrize("done", [True, False])
def test_llamacpp_usage_on_finish_chunk(done):
    ev = [(chat("a"), 0.1), (chat("b"), 0.2), (chat("c"), 0.3)]
    ev.append((chat(None, finish="stop", usage=usage(3, 12), timings={"predicted_n": 3}), 0.31))
    if done:
        ev.append((b"[DONE]", 0.32))
    r = run(ev)
    assert r.ok and r.completion_tokens == 3 and r.prompt_tokens == 12 and not r.tokens_estimated
    assert np.array_equal(r.itl_token_w, [1, 1])


def test_no_usage_counts_content_chunks():
    ev = [(completion(f"t{i}"), 0.1 * (i + 1)) for i in range(5)]
    ev += [(completion("", finish="length"), 0.5), (b"[DONE]", 0.5)]
    r = run(ev, endpoint=COMPLETIONS)
    assert r.ok and r.tokens_estimated and r.completion_tokens == 5 and r.prompt_tokens is None
    assert r.tpot_s == pytest.approx(0.1)


def test_transformers_serve_finish_reason_without_done_is_complete():
    ev = [(chat("a"), 0.1), (chat("b"), 0.2), (chat(None, finish="stop"), 0.2)]
    r = run(ev, t_end=0.3, eof=True)
    assert r.ok and r.e2e_s == pytest.approx(0.2)


def test_done_without_finish_reason_is_complete():
    r = run([(completion("a"), 0.1), (completion("b"), 0.2), (b"[DONE]", 0.2)], endpoint=COMPLETIONS)
    assert r.ok and r.finish_reason is None


def test_mid_stream_error_event_is_stream_error_with_tokens_kept():
    long_message = "CUDA out of memory. " * 50
    ev = [(chat("a"), 0.1), (chat("b"), 0.2)]
    ev += [
        (orjson.dumps({"error": {"message": long_message, "type": "InternalServerError", "code": 500}}), 0.25)
    ]
    ev += [(b"[DONE]", 0.26)]
    r = run(ev, t_end=0.3)
    assert not r.ok and r.error_kind == STREAM_ERROR
    assert r.error_message.startswith("CUDA out of memory.") and len(r.error_message) <= MAX_MESSAGE_CHARS
    assert r.completion_tokens == 2 and r.chunks == 2 and r.ttft_s == pytest.approx(0.1)
    assert r.e2e_s == pytest.approx(0.25)  # time of failure
    assert r.tpot_s is None and len(r.itl_token_s) == 0


VLLM_REFUSAL = Path(__file__).resolve().parents[2] / "fixtures" / "vllm" / "completion_refused.sse"


def test_vllms_in_stream_refusal_is_a_client_refusal_with_its_status():
    """vLLM 0.32 refuses a prompt with HTTP 200 and one error event carrying code 400 (recorded from
    the real server): the result has error_status 400, so the start check and the fail-fast rule
    treat it as the refusal it is, not as a server failure mid-stream."""
    events = [(payload, 0.01) for payload in SSEDecoder().feed(VLLM_REFUSAL.read_bytes())]
    r = run(events, endpoint=COMPLETIONS)
    assert (r.error_kind, r.error_status) == (STREAM_ERROR, 400)
    assert r.error_message == "Token id 29386 is out of vocabulary"
    assert is_client_refusal(r.error_kind, r.error_status)


@pytest.mark.parametrize(("code", "status"), [(500, 500), ("400", 400), ("invalid_prompt", None), (None, None),
                                              (200, None), (True, None)])
def test_an_error_events_code_is_its_status_only_when_it_is_an_http_error_status(code, status):
    r = run([(orjson.dumps({"error": {"message": "m", "code": code}}), 0.1), (b"[DONE]", 0.1)])
    assert (r.error_kind, r.error_status) == (STREAM_ERROR, status)
    assert is_client_refusal(r.error_kind, r.error_status) is (status == 400)


def test_old_vllm_top_level_error_object_and_string_error():
    r = run(
        [
            (orjson.dumps({"object": "error", "message": "bad", "type": "x", "code": 400}), 0.1),
            (b"[DONE]", 0.1),
        ]
    )
    assert r.error_kind == STREAM_ERROR and r.error_message == "bad"
    r = run([(orjson.dumps({"error": "plain text"}), 0.1)])
    assert r.error_kind == STREAM_ERROR and r.error_message == "plain text"


def test_abort_finish_reason():
    ev = [(chat("a"), 0.1), (chat("b"), 0.2), (chat(None, finish="abort"), 0.22), (b"[DONE]", 0.23)]
    r = run(ev, t_end=0.3)
    assert not r.ok and r.error_kind == ABORTED and r.completion_tokens == 2
    assert r.e2e_s == pytest.approx(0.22) and r.finish_reason == "abort"


def test_no_content_chunk_is_empty_stream():
    ev = [
        (chat("", role="assistant"), 0.1),
        (chat(None, finish="stop"), 0.2),
        (usage_chunk(0), 0.2),
        (b"[DONE]", 0.2),
    ]
    r = run(ev)
    assert not r.ok and r.error_kind == EMPTY_STREAM and r.ttft_s is None and r.completion_tokens == 0
    assert run([], t_end=1.0).error_kind == EMPTY_STREAM  # 200 and not one data event


def test_tokens_without_text_are_a_textless_ok_request_timed_by_the_finishing_chunk():
    """llama.cpp holds back an unfinished UTF-8 character: 16 tokens of lead bytes stream as one
    chunk with text "" that finishes the request (its exact shape, /v1/completions)."""
    ev = [(completion("", finish="length", usage=usage(16, 32)), 0.25), (b"[DONE]", 0.26)]
    r = run(ev, sent=0.05, endpoint=COMPLETIONS)
    assert r.ok and r.error_kind is None and r.chunks == 0 and not r.tokens_estimated
    assert r.completion_tokens == 16 and r.prompt_tokens == 32 and r.finish_reason == "length"
    assert r.ttft_s == pytest.approx(0.2) and r.e2e_s == pytest.approx(0.2)
    assert r.tpot_s is None and r.decode_tps is None
    assert len(r.itl_token_s) == len(r.itl_chunk_s) == 0
    # chat: no role chunk, an empty delta that finishes, usage in its own chunk after it
    ev = [(chat(None, finish="length"), 0.3), (usage_chunk(2), 0.31), (b"[DONE]", 0.31)]
    r = run(ev)
    assert r.ok and r.chunks == 0 and r.completion_tokens == 2 and r.ttft_s == r.e2e_s == pytest.approx(0.3)


def test_no_text_is_empty_stream_unless_the_servers_usage_counts_tokens_and_a_finish_reason_came():
    assert run([(completion("", finish="length"), 0.2), (b"[DONE]", 0.2)]).error_kind == EMPTY_STREAM  # no usage
    assert run([(usage_chunk(3), 0.2), (b"[DONE]", 0.2)]).error_kind == EMPTY_STREAM  # no finish reason
    r = run([(chat(None, finish="abort", usage=usage(3)), 0.2)])
    assert r.error_kind == ABORTED  # an abort stays an abort


def test_neither_finish_nor_done_at_eof_is_truncated_with_tokens_kept():
    r = run([(chat("a"), 0.1), (chat("b"), 0.2)], t_end=0.5, eof=True)
    assert not r.ok and r.error_kind == TRUNCATED and r.completion_tokens == 2 and r.tokens_estimated
    assert r.e2e_s == pytest.approx(0.5) and "2 content chunks" in r.error_message


def test_transport_error_decides_kind_only_when_incomplete():
    err = RequestError(CONNECTION_RESET, "reset by peer")
    r = run([(chat("a"), 0.1)], t_end=0.4, eof=False, error=err)
    assert (
        r.error_kind == CONNECTION_RESET and r.error_message == "reset by peer" and r.completion_tokens == 1
    )
    r = run([(chat("a"), 0.1), (chat(None, finish="stop"), 0.1)], t_end=5.0, eof=False,
            error=RequestError(READ_TIMEOUT, "no bytes"))  # fmt: skip
    assert r.ok and r.e2e_s == pytest.approx(0.1)


def test_fail_before_any_payload_reports_the_transport_kind():
    rec = RequestRecord(1.0, 10, CHAT)
    r = rec.fail(RequestError(READ_TIMEOUT, "no bytes for 30 s"), 31.0)
    assert not r.ok and r.error_kind == READ_TIMEOUT and r.e2e_s == pytest.approx(30.0)
    assert r.ttft_s is None and r.completion_tokens == 0 and r.chunks == 0


@pytest.mark.parametrize("bad", [b"{not json", b'{"choices": [', b"\xff\xfe"])
def test_invalid_json_raises_malformed_and_finish_reports_it(bad):
    rec = RequestRecord(0.0, 10, CHAT)
    rec.on_payload(chat("a"), 0.1)
    with pytest.raises(RequestError) as e:
        rec.on_payload(bad, 0.2)
    assert e.value.kind == MALFORMED_CHUNK
    r = rec.finish(0.3, eof=False, error=e.value)
    assert not r.ok and r.error_kind == MALFORMED_CHUNK and r.completion_tokens == 1
    assert r.e2e_s == pytest.approx(0.2)


@pytest.mark.parametrize(
    "payload",
    [b'{"hello": "world"}', b"[1, 2]", b'"text"', b"42", b'{"choices": "x"}', b'{"choices": [1]}',
     b'{"choices": [{"delta": "x"}]}', b'{"choices": [], "usage": "lots"}'],
)  # fmt: skip
def test_payload_that_is_not_a_completion_chunk_is_not_openai(payload):
    rec = RequestRecord(0.0, 10, CHAT)
    with pytest.raises(RequestError) as e:
        rec.on_payload(payload, 0.1)
    assert e.value.kind == NOT_OPENAI
    assert rec.finish(0.2, eof=True).error_kind == NOT_OPENAI


def test_usage_only_event_without_choices_key_is_accepted():
    ev = [(completion("a"), 0.1), (completion("b", finish="stop"), 0.2)]
    ev += [(orjson.dumps({"usage": usage(2, 5)}), 0.2), (b"[DONE]", 0.2)]
    r = run(ev, endpoint=COMPLETIONS)
    assert r.ok and r.completion_tokens == 2 and r.prompt_tokens == 5


def test_chunk_tokens_seen_live_count():
    rec = RequestRecord(0.0, 8, CHAT)
    seen = []
    for payload, t in vllm_chat(3, tokens_per_chunk=2, per_chunk_usage=True):
        rec.on_payload(payload, t)
        seen.append(rec.chunk_tokens_seen)
    assert seen == [0, 2, 4, 6, 6, 6, 6]

    rec = RequestRecord(0.0, 8, CHAT)
    seen = []
    for payload, t in vllm_chat(3, tokens_per_chunk=2):  # final usage only: 1 per chunk, then the rest
        rec.on_payload(payload, t)
        seen.append(rec.chunk_tokens_seen)
    assert seen == [0, 1, 2, 3, 3, 6, 6]


def test_per_chunk_usage_with_zero_token_chunk_merges_its_gap():
    ev = [
        (chat("a", usage=usage(1)), 0.1),
        (chat("\ufffd", usage=usage(1)), 0.12),
        (chat("bc", usage=usage(3)), 0.16),
    ]
    ev.append((chat(None, finish="stop", usage=usage(3)), 0.16))
    r = run(ev)
    assert r.ok and r.chunks == 3 and r.completion_tokens == 3
    assert np.allclose(r.itl_token_s, [0.06 / 2]) and np.array_equal(r.itl_token_w, [2])
    assert np.allclose(r.itl_chunk_s, [0.02, 0.04])


def test_single_token_has_no_tpot_or_decode_rate():
    r = run(
        [(completion("a", finish="length"), 0.3), (usage_chunk(1), 0.3), (b"[DONE]", 0.3)],
        endpoint=COMPLETIONS,
    )
    assert r.ok and r.completion_tokens == 1 and r.tpot_s is None and r.decode_tps is None
    assert r.ttft_s == r.e2e_s == pytest.approx(0.3) and len(r.itl_chunk_s) == 0


def test_decoder_and_record_together_same_result_for_any_split():
    events = vllm_chat(20, per_chunk_usage=True)
    wire = b"".join(b"data: " + p + b"\r\n\r\n" for p, _ in events)
    expected = run(events)
    for cut in range(0, len(wire), 7):
        dec, rec, k = SSEDecoder(), RequestRecord(0.0, 20, CHAT), 0
        for part in (wire[:cut], wire[cut:]):
            for p in dec.feed(part):
                rec.on_payload(p, events[k][1])
                k += 1
        r = rec.finish(events[-1][1], eof=True)
        assert k == len(events) and r.ok
        assert np.array_equal(r.itl_token_s, expected.itl_token_s) and r.ttft_s == expected.ttft_s


def test_long_stream_stays_compact():
    r = run(vllm_chat(20_000, gap=0.001))
    assert r.ok and r.completion_tokens == 20_000 and r.itl_token_s.dtype == np.float64
    assert r.itl_token_s.shape == (19_999,) and r.tpot_s == pytest.approx(0.001)


def test_the_response_id_is_the_first_chunks_id():
    """vLLM's completions ids are cmpl-<hex>, chat chatcmpl-<hex>; a chunk without one (or an error
    event) changes nothing, and a stream without any leaves it None."""
    rec = RequestRecord(0.0, 3, "chat")
    rec.on_payload(orjson.dumps({"choices": [{"delta": {"role": "assistant"}}]}), 0.1)  # no id yet
    rec.on_payload(orjson.dumps({"id": "chatcmpl-abc", "choices": [{"delta": {"content": "a"}}]}), 0.2)
    rec.on_payload(orjson.dumps({"id": "chatcmpl-other", "choices": [{"delta": {"content": "b"}}]}), 0.3)
    rec.on_payload(orjson.dumps({"id": 7, "choices": []}), 0.4)
    assert rec.response_id == "chatcmpl-abc"
    plain = RequestRecord(0.0, 1, "completions")
    plain.on_payload(orjson.dumps({"choices": [{"text": "a", "finish_reason": "length"}]}), 0.1)
    plain.on_payload(b"[DONE]", 0.2)
    assert plain.response_id is None and plain.finish(0.2, eof=True).ok
