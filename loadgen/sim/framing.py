"""Bytes on the wire: HTTP/1.1 heads, chunked framing, SSE events and JSON bodies shaped like vLLM/SGLang.

Streaming is the hot path, so a ``StreamFormat`` prebuilds the constant parts of every chunk of one
request once; a chunk is then one ``b"".join`` of a few byte strings (no json.dumps per chunk).
Completions chunks: ``choices[0].text``; chat chunks: ``choices[0].delta.content``, after a
role-only first delta ``{"role": "assistant"}``; a reasoning model's thinking tokens come first as
``delta.reasoning_content`` or ``delta.reasoning`` (a chunk crossing the end of the thinking carries
both fields). Usage: ``include_usage`` adds a final chunk with
``choices: []``; ``continuous_usage_stats`` puts cumulative usage on every chunk (vLLM: only together
with include_usage; SGLang: alone too, and it prints ``"usage": null`` on other chunks). Usage
details, as each server sends them: the thinking tokens sent so far for a request that thinks, vLLM
under ``completion_tokens_details.reasoning_tokens``, SGLang as ``usage.reasoning_tokens`` at the top
level (sglang ``usage_processor.calculate_token_usage``); ``prompt_tokens_details.cached_tokens``
once ``cached_tokens`` is set (prefix cache), which vLLM sends even when 0 and SGLang only when > 0
(``usage_processor._details_if_cached``).
"""

from __future__ import annotations

import json

DONE_EVENT = b"data: [DONE]\n\n"
LAST_CHUNK = b"0\r\n\r\n"  # end of a chunked HTTP body
MALFORMED_EVENT = b'data: {"id": "broken", "choices": [{"text": "\n\n'  # invalid JSON on purpose

REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
    413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
    503: "Service Unavailable",
}
ERROR_TYPES = {
    400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed",
    413: "BadRequestError", 429: "RateLimitError", 500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def http_chunk(payload: bytes) -> bytes:
    """One chunk of a chunked HTTP body."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def head(status: int, content_type: bytes, length: int | None, keep_alive: bool) -> bytes:
    """Response status line and headers; ``length`` None means a chunked body."""
    lines = [
        b"HTTP/1.1 %d %s" % (status, REASONS.get(status, "Error").encode()),
        b"Content-Type: " + content_type,
        b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length,
        b"Connection: keep-alive" if keep_alive else b"Connection: close",
    ]
    if length is None:
        lines.append(b"Cache-Control: no-cache")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def json_response(status: int, obj: object, keep_alive: bool = True) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return head(status, b"application/json", len(body), keep_alive) + body


def sse_error_response(error: dict, keep_alive: bool = True) -> bytes:
    """A whole HTTP 200 event stream that carries only ``error`` then [DONE]: how vLLM refuses a
    streamed prompt it cannot take."""
    body = b"data: %b\n\n" % json.dumps(error, separators=(",", ":")).encode() + DONE_EVENT
    return (head(200, b"text/event-stream; charset=utf-8", None, keep_alive) + http_chunk(body) + LAST_CHUNK)


def error_obj(status: int, message: str) -> dict:
    """The OpenAI-style error body both vLLM and SGLang send."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "APIError"),
                      "param": None, "code": status}}


def usage_obj(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}


class StreamFormat:
    """Prebuilt byte templates for the SSE events of one streaming request."""

    def __init__(self, *, chat: bool, rid: str, created: int, model: str, prompt_tokens: int,
                 flavor: str, include_usage: bool, continuous_usage: bool, reasoning_key: str = "reasoning",
                 reasoning_tokens: int = 0, reasoning_usage: bool = True):
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.reasoning_tokens = reasoning_tokens  # the request's thinking tokens (its first ones)
        self.reasoning_usage = reasoning_usage and reasoning_tokens > 0
        self.cached_tokens: int | None = None  # set by the stream once the engine looked the prompt up
        self.include_usage = include_usage
        self.continuous = continuous_usage and (include_usage or flavor == "sglang")
        self._sglang = flavor == "sglang"
        self._null_usage = b',"usage":null' if self._sglang else b""
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        self._prefix = b'data: {"id":"%b","object":"%b","created":%d,"model":%b,"choices":[' % (
            rid.encode(), obj, created, json.dumps(model).encode())
        if chat:
            self._open = self._prefix + b'{"index":0,"delta":{"content":"'
            self._open_reasoning = self._prefix + b'{"index":0,"delta":{"%b":"' % reasoning_key.encode()
            self._mid = b'"},"logprobs":null,"finish_reason":'
            self._close = b"}]"
        else:
            self._open = self._prefix + b'{"index":0,"text":"'
            self._mid = b'","logprobs":null,"finish_reason":'
            self._close = b',"stop_reason":null}]'

    def _usage(self, completion: int) -> bytes:
        p = self.prompt_tokens
        details = b""
        if self.cached_tokens is not None and (self.cached_tokens or not self._sglang):  # SGLang omits a 0
            details += b',"prompt_tokens_details":{"cached_tokens":%d}' % self.cached_tokens
        if self.reasoning_usage:
            thinking = min(completion, self.reasoning_tokens)
            details += (b',"reasoning_tokens":%d' if self._sglang else
                        b',"completion_tokens_details":{"reasoning_tokens":%d}') % thinking
        return b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%b}' % (
            p, p + completion, completion, details)

    def role_event(self) -> bytes:
        usage = self._usage(0) if self.continuous else self._null_usage
        return (self._prefix + b'{"index":0,"delta":{"role":"assistant"},"logprobs":null,'
                b'"finish_reason":null}]' + usage + b"}\n\n")

    def content_event(self, text: bytes, completion: int, finish: bytes | None = None,
                      reasoning: bytes = b"") -> bytes:
        """One content chunk; ``finish`` e.g. b"length" on the last one; ``completion`` = tokens so far;
        ``reasoning``: the chunk's thinking text (chat), before its answer ``text`` if any."""
        usage = self._usage(completion) if self.continuous else self._null_usage
        reason = b'"%b"' % finish if finish else b"null"
        if reasoning:
            head = self._open_reasoning + reasoning + (b'","content":"' + text if text else b"")
            return b"".join((head, self._mid, reason, self._close, usage, b"}\n\n"))
        return b"".join((self._open, text, self._mid, reason, self._close, usage, b"}\n\n"))

    def usage_event(self, completion: int) -> bytes:
        """The include_usage final chunk, or b"" when the client did not ask for it."""
        if not self.include_usage:
            return b""
        return self._prefix + b"]" + self._usage(completion) + b"}\n\n"

    @staticmethod
    def error_event(message: str, type_: str, code: int) -> bytes:
        return b"data: %b\n\n" % json.dumps({"error": {"message": message, "type": type_, "code": code}}).encode()


def completion_obj(*, chat: bool, rid: str, created: int, model: str, text: str, finish: str,
                   prompt: int, completion: int) -> dict:
    """A non-streaming completion response body."""
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model, "choices": [choice], "usage": usage_obj(prompt, completion)}
