"""One streamed request: SSE data payloads + arrival times in, a RequestResult with its metrics out.

Pure: the client passes every timestamp (``time.perf_counter()`` seconds). Per payload the record
parses the JSON once (orjson) and appends the arrival time and token count of content chunks to
compact arrays; ``finish`` computes every metric at once with numpy.

Metric formulas (t = arrival time of a content chunk, i.e. a chunk carrying generated text):

- TTFT = t(first content chunk) - t(sent)
- E2E = t(last content chunk) - t(sent); a failed request: t(failure) - t(sent)
- per-chunk ITL gap_i = t(chunk i) - t(chunk i-1), i >= 1: one sample per chunk
- per-token ITL = gap_i / n_i weighted by n_i (n_i = tokens in chunk i): one sample per token.
  n_i comes from per-chunk cumulative usage (vLLM ``continuous_usage_stats``) as the increase of
  ``completion_tokens`` since the previous content chunk; without it the final usage N is spread
  evenly over the C chunks (n_i = floor((i+1)N/C) - floor(iN/C)). Chunks with n_i = 0 give no
  sample; their gap counts toward the next chunk that carries tokens.
- TPOT = (E2E - TTFT) / (N - 1); None if N < 2
- decode rate = (N - 1) / (E2E - TTFT) tokens/s; None if N < 2 or E2E == TTFT
- N = usage ``completion_tokens`` (the last usage seen), else the number of content chunks
  (``tokens_estimated=True``)
- content chunk: a chunk carrying completions text, or chat ``delta.content``,
  ``delta.reasoning_content`` or ``delta.reasoning`` text; so TTFT is the first token of any kind.
  The answer's own figures (time to first answer token, reasoning tokens, answer decode rate) and
  the cached prompt tokens: loadgen.stats.answer.

A textless request: the stream completed (a finish reason other than "abort") and the server's
usage counts N >= 1 tokens, but no chunk carried text: the server held it back (llama.cpp keeps an
incomplete UTF-8 character until it is whole, so a short output can end mid-character) or the
tokens render as nothing. It is ok (the server did the work; its tokens count), ``chunks`` = 0, and
it is timed by the chunk that finished it: TTFT = E2E = t(finishing chunk) - t(sent); TPOT, decode
rate and ITL have no sample. Without usage, or with usage 0, it is EMPTY_STREAM.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import orjson

from loadgen.errors import (
    ABORTED,
    EMPTY_STREAM,
    MALFORMED_CHUNK,
    NOT_OPENAI,
    STREAM_ERROR,
    TRUNCATED,
    RequestError,
)
from loadgen.stats.answer import (
    APPORTIONED,
    STREAM,
    answer_figures,
    apportioned_reasoning_tokens,
    delta_parts,
    stream_reasoning_tokens,
    usage_cached_tokens,
    usage_reasoning_tokens,
)

MAX_MESSAGE_CHARS = 200  # server error texts can be huge (stack traces); keep the start
_EMPTY_F = np.empty(0, dtype=np.float64)
_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_F.flags.writeable = False
_EMPTY_I.flags.writeable = False
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


@dataclass(slots=True)
class RequestResult:
    """Outcome and metrics of one request (formulas in the module docstring).

    Latency fields are seconds. For a failed request ``ok`` is False, ``error_kind`` is one of
    ``loadgen.errors.FAILURE_KINDS``, ``completion_tokens`` counts the tokens received before the
    failure, ``e2e_s`` runs to the failure, ``ttft_s`` is set if a content chunk arrived, and
    TPOT, decode rate and the ITL arrays are left empty (they describe complete streams only).
    When every chunk carries one token, ``itl_token_s`` *is* ``itl_chunk_s`` (the same array,
    weights all 1), which lets stats bin the samples once.
    """

    ok: bool
    error_kind: str | None
    error_message: str
    prompt_tokens: int | None  # usage.prompt_tokens; None when the server sent no usage
    completion_tokens: int
    tokens_estimated: bool  # no usage seen: completion_tokens counts content chunks
    ttft_s: float | None
    e2e_s: float
    tpot_s: float | None
    decode_tps: float | None
    itl_token_s: np.ndarray  # per-token ITL values, one per chunk i >= 1 with tokens...
    itl_token_w: np.ndarray  # ...weighted by the tokens in that chunk
    itl_chunk_s: np.ndarray  # per-chunk gaps
    finish_reason: str | None
    chunks: int  # content chunks received; 0 for an ok request: textless (module docstring)
    # the HTTP status of a failure answered before the stream, or the 4xx/5xx ``code`` an error
    # event carried mid-stream (vLLM refuses a prompt with HTTP 200 and {"error": {"code": 400}})
    error_status: int | None = None
    # loadgen.stats.answer: the answer after a reasoning model's thinking, and the prompt cache's share
    ttfat_s: float | None = None  # time to first answer token; == ttft_s without reasoning
    reasoning_tokens: int = 0
    reasoning_source: str | None = None  # "usage" | "stream" | "apportioned" | None (no reasoning)
    answer_decode_tps: float | None = None
    cached_prompt_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, if sent
    # the request's names in the server's logs (set by loadgen.wire.exchange after the stream): the
    # stream's "id" and the x-request-id header we sent
    response_id: str | None = None
    x_request_id: str | None = None


class RequestRecord:
    """Accumulates one stream. Call ``on_payload`` per SSE data payload, then ``finish`` once.

    ``chunk_tokens_seen`` grows as chunks arrive (for live throughput windows): by the per-chunk
    usage increase when the server sends cumulative usage, else by 1 per content chunk; a later
    usage report above the count (e.g. the final usage chunk) adds the difference when it arrives,
    so the total ends equal to usage. It never decreases.
    """

    __slots__ = (
        "sent_s",
        "expected_output_tokens",
        "endpoint",
        "chunk_tokens_seen",
        "finish_reason",
        "done",
        "_times",
        "_tokens",
        "_usage_ct",
        "_usage_pt",
        "_ct_at_chunk",
        "_payloads",
        "_finish_t",
        "_stream_error",
        "_raised",
        "_first_answer_t",
        "_last_answer_t",
        "_reasoning_seen",
        "_reasoning_at",
        "_usage_rt",
        "_usage_cached",
        "response_id",
    )

    def __init__(self, sent_s: float, expected_output_tokens: int, endpoint: str):
        self.sent_s = sent_s
        self.expected_output_tokens = expected_output_tokens
        self.endpoint = endpoint
        self.chunk_tokens_seen = 0
        self.finish_reason: str | None = None
        self.done = False  # [DONE] seen
        self._times = array("d")  # arrival time of each content chunk
        # tokens of each content chunk that carried usage; per-chunk usage <=> as long as _times
        self._tokens = array("i")
        self._usage_ct: int | None = None  # last usage.completion_tokens (cumulative)
        self._usage_pt: int | None = None
        self._ct_at_chunk = 0  # usage.completion_tokens at the previous content chunk
        self._payloads = 0
        self._finish_t = 0.0
        self._stream_error: tuple[str, float, int | None] | None = None  # (message, t, code) of an {"error"} event
        self._raised: tuple[str, str, float] | None = None  # (kind, message, t) raised by on_payload
        self._first_answer_t: float | None = None  # loadgen.stats.answer
        self._last_answer_t = 0.0
        self._reasoning_seen = 0  # reasoning tokens counted from the stream
        self._reasoning_at = array("i")  # 2 i + (1 if it had answer text too) per reasoning chunk i
        self._usage_rt: int | None = None  # usage.completion_tokens_details.reasoning_tokens
        self._usage_cached: int | None = None  # usage.prompt_tokens_details.cached_tokens
        self.response_id: str | None = None  # the stream's "id" (vLLM cmpl-..., chatcmpl-...), first seen

    def on_payload(self, payload: bytes, t: float) -> None:
        """Interpret one SSE data payload that arrived at ``t``.

        Raises RequestError(MALFORMED_CHUNK) for invalid JSON and RequestError(NOT_OPENAI) for
        JSON that is not a completion chunk; ``finish`` then reports the same failure.
        """
        self._payloads += 1
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = _loads(payload)
        except _JSONDecodeError as e:
            raise self._raise(
                MALFORMED_CHUNK, f"invalid JSON in an SSE data event ({e}): {_preview(payload)}", t
            ) from None
        try:
            choices = obj["choices"]
        except (KeyError, TypeError):
            choices = None
        try:
            if choices is None:
                self._not_a_chunk(obj, payload, t)
                return
            if self.response_id is None:  # the server's name for the request: its logs carry it
                rid = obj.get("id")
                if isinstance(rid, str) and rid:
                    self.response_id = rid[:MAX_MESSAGE_CHARS]
            usage = obj.get("usage")
            # SGLang sends "usage": null on ordinary chunks; ct: cumulative tokens if usage is here
            ct = self._on_usage(usage) if usage else None
            if not choices:  # the include_usage final chunk has "choices": []
                return
            c = choices[0]
            delta = c.get("delta")
            if delta is None:  # /v1/completions: all answer
                text = answer = c.get("text")
                reasoning = None
            else:  # chat; a role-only delta has none of these and is not a token
                reasoning, answer = delta_parts(delta)
                text = answer or reasoning
            if text:
                self._times.append(t)
                n = None
                if ct is not None:
                    n = ct - self._ct_at_chunk
                    self._ct_at_chunk = ct
                    n = n if n > 0 else 0
                    self._tokens.append(n)
                else:
                    self.chunk_tokens_seen += 1
                if answer:
                    if self._first_answer_t is None:
                        self._first_answer_t = t
                    self._last_answer_t = t
                if reasoning:
                    self._reasoning_seen += stream_reasoning_tokens(bool(answer), n)
                    self._reasoning_at.append(2 * (len(self._times) - 1) + (1 if answer else 0))
            reason = c.get("finish_reason")
            if reason:
                self._on_finish_reason(reason, t)
        except (AttributeError, TypeError, KeyError, IndexError) as e:
            raise self._raise(
                NOT_OPENAI, f"a data event is not an OpenAI completion chunk ({e!r}): {_preview(payload)}", t
            ) from None

    def _on_usage(self, usage: dict) -> int | None:
        """Record a usage object; return its completion_tokens (None if it has none)."""
        rt, cached = usage_reasoning_tokens(usage), usage_cached_tokens(usage)
        if rt is not None:
            self._usage_rt = rt
        if cached is not None:
            self._usage_cached = cached
        ct = usage.get("completion_tokens")
        if ct is None:
            return None
        self._usage_ct = ct
        self._usage_pt = usage.get("prompt_tokens")
        if ct > self.chunk_tokens_seen:
            self.chunk_tokens_seen = ct
        return ct

    def _on_finish_reason(self, reason, t: float) -> None:
        if isinstance(reason, dict):  # SGLang's native form {"type": "abort", ...}
            reason = reason.get("type")
        self.finish_reason = str(reason)
        self._finish_t = t

    def _not_a_chunk(self, obj, payload: bytes, t: float) -> None:
        """A payload without "choices": an error event, a usage-only event, or not OpenAI at all."""
        if isinstance(obj, dict):
            err = obj.get("error")
            if err is None and obj.get("object") == "error":  # older vLLM: the error at top level
                err = obj
            if err is not None:
                msg = err.get("message", err) if isinstance(err, dict) else err
                if self._stream_error is None:
                    code = _http_code(err.get("code") if isinstance(err, dict) else None)
                    self._stream_error = (str(msg)[:MAX_MESSAGE_CHARS], t, code)
                return
            if isinstance(obj.get("usage"), dict):
                self._on_usage(obj["usage"])
                return
        raise self._raise(
            NOT_OPENAI,
            f"a data event has no 'choices', 'usage' or 'error': {_preview(payload)} "
            f"(is {self.endpoint} an OpenAI-compatible completion endpoint?)",
            t,
        )

    def _raise(self, kind: str, message: str, t: float) -> RequestError:
        if self._raised is None:
            self._raised = (kind, message, t)
        return RequestError(kind, message)

    def finish(self, t_end: float, eof: bool, error: RequestError | None = None) -> RequestResult:
        """Validate the stream and compute its metrics.

        ``eof``: the byte stream ended (True) or the reader stopped early (False). ``error``: the
        transport failure that stopped the reader, if any; it decides the failure kind only when
        the stream was incomplete (a finish reason or [DONE] already makes the request complete).
        Order: a failure raised by on_payload, an error event (STREAM_ERROR), finish_reason
        "abort" (ABORTED), complete without content and without usage tokens (EMPTY_STREAM; with
        them it is a textless ok request, module docstring), incomplete (``error``'s kind,
        else EMPTY_STREAM if nothing arrived, else TRUNCATED).
        """
        kind, msg, t_fail = self._failure(t_end, eof, error)
        if kind == STREAM_ERROR and self._raised is None:
            status = self._stream_error[2]
        else:
            status = error.status if error is not None and kind == error.kind else None
        n_chunks = len(self._times)
        times = np.frombuffer(self._times, dtype=np.float64) if n_chunks else _EMPTY_F
        estimated = self._usage_ct is None
        n_tokens = n_chunks if estimated else self._usage_ct
        ttft = float(times[0]) - self.sent_s if n_chunks else None
        seen, how = self._reasoning_seen, STREAM
        # only a usage total, and chunks of several tokens (N = C: one token each, exact)
        if self._reasoning_at and n_tokens != n_chunks and len(self._tokens) != n_chunks:
            seen, how = apportioned_reasoning_tokens(n_tokens, n_chunks, self._reasoning_at), APPORTIONED
        a = answer_figures(self.sent_s, self._first_answer_t, self._last_answer_t, n_tokens, self._usage_rt,
                           seen, how)
        answer = (a.ttfat_s, a.reasoning_tokens, a.reasoning_source, a.answer_decode_tps, self._usage_cached)
        if kind is not None:
            return RequestResult(
                False, kind, msg, self._usage_pt, max(n_tokens, 0), estimated, ttft, t_fail - self.sent_s,
                None, None, _EMPTY_F, _EMPTY_I, _EMPTY_F, self.finish_reason, n_chunks, status, *answer,
            )  # fmt: skip
        if not n_chunks:  # textless (module docstring): timed by its finishing chunk
            e2e = self._finish_t - self.sent_s
            return RequestResult(
                True, None, "", self._usage_pt, n_tokens, False, e2e, e2e, None, None,
                _EMPTY_F, _EMPTY_I, _EMPTY_F, self.finish_reason, 0, None, *answer,
            )  # fmt: skip
        e2e = float(times[-1]) - self.sent_s
        span = e2e - ttft
        tpot = span / (n_tokens - 1) if n_tokens >= 2 else None
        decode_tps = (n_tokens - 1) / span if n_tokens >= 2 and span > 0 else None
        itl_chunk = np.diff(times)
        itl_token, itl_w = self._per_token_itl(times, itl_chunk, n_tokens)
        return RequestResult(
            True, None, "", self._usage_pt, n_tokens, estimated, ttft, e2e, tpot, decode_tps,
            itl_token, itl_w, itl_chunk, self.finish_reason, n_chunks, None, *answer,
        )  # fmt: skip

    def fail(self, error: RequestError, t: float) -> RequestResult:
        """The reader stopped at ``t`` because of ``error``: ``finish(t, eof=False, error=error)``.

        A stream that was already complete (finish reason or [DONE]) is still reported as ok.
        """
        return self.finish(t, eof=False, error=error)

    def _failure(self, t_end: float, eof: bool, error: RequestError | None) -> tuple:
        if self._raised is not None:
            return self._raised
        if self._stream_error is not None:
            return (STREAM_ERROR, *self._stream_error[:2])
        if self.finish_reason == "abort":
            return ABORTED, "the server aborted the request (finish_reason 'abort')", self._finish_t
        if self.finish_reason or self.done:
            if not self._times and not (self.finish_reason and self._usage_ct):
                end = f"finish_reason {self.finish_reason!r}" if self.finish_reason else "[DONE]"
                return EMPTY_STREAM, f"the stream ended with {end} before any content chunk", t_end
            return None, "", t_end
        if error is not None:
            return error.kind, error.message, t_end
        where = "at end of stream" if eof else "when the reader stopped"
        if not self._payloads:
            return EMPTY_STREAM, f"no SSE data event arrived ({where})", t_end
        return (
            TRUNCATED,
            f"neither a finish_reason nor [DONE] {where}, after {len(self._times)} content chunks",
            t_end,
        )

    def _per_token_itl(self, times: np.ndarray, gaps: np.ndarray, n_tokens: int):
        """Per-token ITL values and weights (formula in the module docstring)."""
        n_chunks = len(times)
        if n_chunks < 2:
            return _EMPTY_F, _EMPTY_I
        if len(self._tokens) == n_chunks:  # every content chunk carried cumulative usage
            n = np.frombuffer(self._tokens, dtype=np.int32).astype(np.int64)
        elif n_tokens == n_chunks:  # one token per chunk: the common case, no spreading
            return gaps, np.ones(n_chunks - 1, dtype=np.int64)
        else:
            n = np.diff(np.arange(n_chunks + 1, dtype=np.int64) * n_tokens // n_chunks)
        has = n > 0
        if not has.all():
            times, n = times[has], n[has]
            gaps = np.diff(times)
        return gaps / n[1:], n[1:]


def _http_code(code) -> int | None:
    """An error event's ``code`` when it is an HTTP status (400-599, as an int or digits), else None:
    SGLang and vLLM send the status there; other servers send names ("invalid_prompt")."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600 else None


def _preview(payload: bytes, limit: int = 120) -> str:
    text = payload[:limit].decode("utf-8", "replace")
    return repr(text + "..." if len(payload) > limit else text)
