"""Bounded server reasons per failure kind (exact counts, exact merge) and the fail-fast rule."""

from __future__ import annotations

import json

import msgpack

from loadgen.errors import is_client_refusal
from loadgen.run.fail_fast import FailFast
from loadgen.stats.failures import EXCERPT_CHARS, PER_KIND, FailureSamples, excerpt


def test_excerpt_is_one_short_line():
    assert excerpt("a\n  b\tc") == "a b c"
    long = excerpt("x" * 1000)
    assert len(long) == EXCERPT_CHARS and long.endswith("…")


def test_distinct_messages_are_bounded_and_counts_exact():
    s = FailureSamples(per_kind=2)
    assert s.add("http_4xx", 400, "Prompt contains invalid tokens") is True
    assert s.add("http_4xx", 400, "Prompt contains invalid tokens") is False
    assert s.add("http_4xx", 422, "Unexpected fields") is True
    for i in range(10_000):
        assert s.add("http_4xx", 400, f"message {i}") is False  # beyond the bound: counted only
    s.add("read_timeout", None, "no bytes within the read timeout")
    out = s.to_summary()
    assert out["http_4xx"] == [{"status": 400, "message": "Prompt contains invalid tokens", "requests": 2},
                               {"status": 422, "message": "Unexpected fields", "requests": 1}]
    assert out["other_messages"] == {"http_4xx": 10_000}
    assert out["read_timeout"][0]["status"] is None
    assert len(json.dumps(out)) < 1000  # bounded whatever the run length


def test_merge_over_the_wire_keeps_every_count():
    a, b, whole = FailureSamples(), FailureSamples(), FailureSamples()
    events = [("http_4xx", 400, f"m{i % 7}") for i in range(50)] + [("http_5xx", 500, "boom")] * 3
    for i, (k, st, m) in enumerate(events):
        (a if i % 2 else b).add(k, st, m)
        whole.add(k, st, m)
    merged = FailureSamples()
    for part, codec in ((a, json), (b, msgpack)):
        merged.merge(FailureSamples.from_message(codec.loads(codec.dumps(part.to_message()))))

    def total(s, kind):
        return sum(e[2] for e in s.samples.get(kind, [])) + s.other.get(kind, 0)

    assert total(merged, "http_4xx") == 50 == total(whole, "http_4xx")
    assert total(merged, "http_5xx") == 3 and len(merged.samples["http_4xx"]) == PER_KIND


def test_client_refusals():
    assert is_client_refusal("http_4xx", 400) and is_client_refusal("http_4xx", 422)
    assert is_client_refusal("not_openai", None)
    assert not is_client_refusal("overload_429", 429) and not is_client_refusal("http_4xx", 408)
    assert not is_client_refusal("http_5xx", 500) and not is_client_refusal("read_timeout", None)


def test_fail_fast_trips_once_after_the_same_refusal():
    ff = FailFast(threshold=3)
    assert not ff.observe(False, "http_4xx", 400, "bad tokens 1")
    assert not ff.observe(False, "http_4xx", 400, "bad tokens 2")  # same status, other text: same error
    assert ff.observe(False, "http_4xx", 400, "bad tokens 3")
    assert not ff.observe(False, "http_4xx", 400, "again")  # once
    assert ff.tripped and ff.message == "bad tokens 1" and ff.first == ("http_4xx", 400)


def test_fail_fast_counts_vllms_in_stream_refusals():
    """vLLM refuses a prompt inside a 200 stream (an error event with code 400): such a request is
    STREAM_ERROR with status 400, a refusal the rule counts; a 500 event is not one."""
    ff = FailFast(threshold=2)
    assert not ff.observe(False, "stream_error", 400, "Token id 29386 is out of vocabulary")
    assert ff.observe(False, "stream_error", 400, "Token id 29001 is out of vocabulary")
    assert ff.first == ("stream_error", 400)
    engine = FailFast(threshold=2)
    assert not any(engine.observe(False, "stream_error", 500, "engine died") for _ in range(5))


def test_fail_fast_stays_off_after_a_success_or_a_mixed_start():
    ok_first = FailFast(threshold=2)
    ok_first.observe(True)
    assert not any(ok_first.observe(False, "http_4xx", 400, "x") for _ in range(10))
    mixed = FailFast(threshold=2)
    mixed.observe(False, "http_4xx", 400, "x")
    mixed.observe(False, "http_4xx", 404, "y")
    assert not any(mixed.observe(False, "http_4xx", 400, "x") for _ in range(10))
    overload = FailFast(threshold=2)
    assert not any(overload.observe(False, "overload_429", 429, "slow down") for _ in range(10))


def test_server_reason_reads_the_shapes_real_servers_answer():
    from loadgen.stats.failures import server_reason

    assert server_reason(b'{"error":{"code":400,"message":"Prompt contains invalid tokens","type":"x"}}') == \
        "Prompt contains invalid tokens"
    assert server_reason(b'{"detail":"Unexpected fields in the request: {\'ignore_eos\', \'min_tokens\'}"}') == \
        "Unexpected fields in the request: {'ignore_eos', 'min_tokens'}"
    pyd = b'{"detail":[{"type":"string_type","loc":["body","prompt"],"msg":"Input should be a valid string"}]}'
    assert server_reason(pyd) == "prompt: Input should be a valid string"
    assert server_reason(b'{"error": "model not found"}') == "model not found"
    page = (b"<!DOCTYPE HTML><html><head><title>Error response</title><style>p{}</style></head>"
            b"<body><h1>Error response</h1><p>Error code: 501</p></body></html>")
    assert server_reason(page) == "Error response"
    assert server_reason(b"<html><body><h1>Not &amp; found</h1>\n<p>x</p></body></html>") == "Not & found x"
    assert server_reason(b"plain\ntext") == "plain text" and server_reason(b"") == ""


def test_an_error_events_code_does_not_rename_it_for_locust_but_is_said():
    """A stream error keeps its name in Locust's table whatever its code (HTTP said 200); the line
    to the user says the code came in an error event."""
    from loadgen.stats.failures import answer_words, locust_name

    assert locust_name("stream_error", 500) == "stream_error" and locust_name("http_5xx", 500) == "http_500"
    assert answer_words("stream_error", 400) == "an error event (code 400)"
    assert answer_words("http_4xx", 401) == "HTTP 401" and answer_words("read_timeout", None) == "read_timeout"
