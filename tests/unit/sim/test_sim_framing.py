"""Pure parts of the simulator's HTTP layer: byte templates, request validation, request reader."""

from __future__ import annotations

import json

import pytest

from loadgen.sim import framing
from loadgen.sim.httpio import HTTPError, RequestReader
from loadgen.sim.request import BadRequest, parse
from loadgen.sim.tokens import count_text, generated_text, messages_text


def events(data: bytes) -> list[bytes]:
    assert data.endswith(b"\n\n")
    return [e[len(b"data: "):] for e in data[:-2].split(b"\n\n")]


def fmt(**kw) -> framing.StreamFormat:
    base = dict(chat=False, rid="cmpl-1", created=1, model='m"odel', prompt_tokens=7, flavor="vllm",
                include_usage=False, continuous_usage=False)
    return framing.StreamFormat(**{**base, **kw})


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
@pytest.mark.parametrize("include_usage, continuous", [(False, False), (True, False), (True, True),
                                                        (False, True)])
def test_every_template_is_valid_json_with_the_right_fields(chat, flavor, include_usage, continuous):
    f = fmt(chat=chat, flavor=flavor, include_usage=include_usage, continuous_usage=continuous)
    chunk = json.loads(events(f.content_event(b" the", 3))[0])
    last = json.loads(events(f.content_event(b" of and", 5, b"length"))[0])
    assert chunk["model"] == 'm"odel' and chunk["id"] == "cmpl-1"
    key = ("delta", "content") if chat else ("text",)
    text = chunk["choices"][0]
    for k in key:
        text = text[k]
    assert text == " the"
    assert chunk["choices"][0]["finish_reason"] is None and last["choices"][0]["finish_reason"] == "length"
    # vLLM: per-chunk usage only with include_usage; SGLang honours continuous_usage_stats alone
    per_chunk = continuous and (include_usage or flavor == "sglang")
    if per_chunk:
        assert last["usage"] == {"prompt_tokens": 7, "total_tokens": 12, "completion_tokens": 5}
    elif flavor == "sglang":
        assert last["usage"] is None
    else:
        assert "usage" not in last
    final = f.usage_event(5)
    if include_usage:
        obj = json.loads(events(final)[0])
        assert obj["choices"] == [] and obj["usage"]["completion_tokens"] == 5
    else:
        assert final == b""
    if chat:
        role = json.loads(events(f.role_event())[0])
        assert role["choices"][0]["delta"] == {"role": "assistant"}


def test_error_and_malformed_events():
    err = json.loads(events(framing.StreamFormat.error_event("boom", "InternalServerError", 500))[0])
    assert err == {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}
    with pytest.raises(ValueError):
        json.loads(events(framing.MALFORMED_EVENT)[0])


def test_http_chunk_framing_and_heads():
    assert framing.http_chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    head = framing.head(200, b"text/event-stream", None, keep_alive=True)
    assert b"Transfer-Encoding: chunked" in head and head.endswith(b"\r\n\r\n")
    resp = framing.json_response(429, framing.error_obj(429, "slow down"), keep_alive=False)
    assert resp.startswith(b"HTTP/1.1 429 Too Many Requests\r\n") and b"Connection: close" in resp
    assert json.loads(resp.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "RateLimitError"


def test_token_rule_is_consistent_between_prompts_and_generated_text():
    assert count_text("  hello,  world\nagain\t!") == 4
    text = generated_text(offset=5, start=10, n=37).decode()
    assert count_text(text) == 37 and generated_text(5, 10, 1) == generated_text(5, 10, 1)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "image_url"}]},
            {"role": "assistant", "content": None}, {"role": "user", "content": "c"}]
    assert count_text(messages_text(msgs)) == 3
    with pytest.raises(ValueError, match="messages"):
        messages_text([])


def body(**kw) -> bytes:
    return json.dumps(kw).encode()


def test_parse_request_fields_and_defaults():
    p = parse(body(prompt=[1, 2, 3], max_tokens=9, min_tokens=9, ignore_eos=True, stream=True,
                   stream_options={"include_usage": True, "continuous_usage_stats": True}), False, 100, 16)
    assert (p.prompt_tokens, p.max_tokens, p.min_tokens, p.ignore_eos, p.stream) == (3, 9, 9, True, True)
    assert p.include_usage and p.continuous_usage
    chat = parse(body(messages=[{"role": "user", "content": "a b c d"}], max_completion_tokens=4), True, 100, 16)
    assert (chat.prompt_tokens, chat.max_tokens, chat.stream) == (4, 4, False)
    assert parse(body(prompt="x y"), False, 100, 16).max_tokens == 16  # default_max_tokens
    assert parse(body(prompt=[1] * 95), False, 100, 16).max_tokens == 5  # what is left of the context


@pytest.mark.parametrize("raw, fragment", [
    (b"{not json", "not valid JSON"),
    (body(prompt=[1] * 90, max_tokens=11), "maximum context length is 100 tokens"),
    (body(prompt=[1], max_tokens="5"), "'max_tokens' must be an integer"),
    (body(prompt=[1], n=2), "'n' must be 1"),
    (body(prompt=[1], stream="yes"), "'stream' must be a boolean"),
    (body(prompt=[1.5]), "list of token IDs"),
])
def test_parse_rejects_bad_requests(raw, fragment):
    with pytest.raises(BadRequest, match=fragment):
        parse(raw, False, 100, 16)


class TrickleSocket:
    """Hands the reader its input a few bytes at a time, like a slow network."""

    def __init__(self, data: bytes, step: int):
        self.data, self.step = data, step

    def recv(self, _n: int) -> bytes:
        out, self.data = self.data[: self.step], self.data[self.step:]
        return out


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_request_reader_handles_split_bytes_keep_alive_and_chunked_bodies(step):
    raw = (b"POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
           b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
           b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n")
    reader = RequestReader(TrickleSocket(raw, step))
    first = reader.read()
    assert (first.method, first.path, first.body, first.keep_alive) == ("POST", "/v1/completions", b"hello", True)
    second = reader.read()
    assert (second.path, second.body, second.keep_alive) == ("/a", b"abcde", False)
    assert reader.read() is None


@pytest.mark.parametrize("raw, status", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort", 400),
])
def test_request_reader_errors(raw, status):
    with pytest.raises(HTTPError) as info:
        RequestReader(TrickleSocket(raw, 7)).read()
    assert info.value.status == status
