"""A reasoning model's stream split into thinking and answer, and the usage details servers report.

Pure: no I/O, no clock; ``loadgen.stats.records`` passes the arrival times it recorded.

A chat stream of a reasoning model sends its thinking first, as ``delta.reasoning_content``
(SGLang, DeepSeek-style servers, vLLM before ~0.19.1) or ``delta.reasoning`` (newer vLLM), then the
answer as ``delta.content``; one delta may carry both (a chunk of several tokens that crosses the
end of the thinking). Completions text (``choices[0].text``) is all answer.

Per request (t = arrival time of a chunk, N = completion tokens, R = reasoning tokens):

- TTFT (loadgen.stats.records) = t(first chunk of ANY kind, reasoning included) - t(sent)
- time to first answer token, ``ttfat_s`` = t(first chunk carrying answer text) - t(sent); None
  when no answer text arrived (the output ended while thinking). Without reasoning it equals TTFT.
- R = ``usage.completion_tokens_details.reasoning_tokens`` (SGLang: ``usage.reasoning_tokens``, at the
  top level of usage) when the server reports it (> 0): source "usage"; else from the stream, per
  chunk that carried reasoning text its tokens n_i, a chunk that also carried answer text counting
  all its tokens but one (max(n_i - 1, 0)):
  - source "stream": n_i known, from per-chunk cumulative usage (that chunk's token increase), or
    n_i = 1 when N = C (no usage at all: N is the chunk count; or usage agrees: one token a chunk);
  - source "apportioned": usage gave only the total N (final usage) over C content chunks, so
    n_i = floor((i+1)N/C) - floor(iN/C), the same spread as the per-token ITL (loadgen.stats.records):
    a chunk of several tokens (speculative decoding, a stream interval) is not counted as one.
  Source None when R = 0.
- answer tokens A = N - R; answer decode rate = (A - 1) / (t(last answer chunk) - t(first answer
  chunk)) tokens/s; None if A < 2 or the span is 0. Without reasoning it equals the decode rate.
- cached prompt tokens = ``usage.prompt_tokens_details.cached_tokens``; None when the server sent
  no such detail (vLLM without ``--enable-prompt-tokens-details``, SGLang without
  ``--enable-cache-report``, and SGLang with it when nothing was cached: it omits a 0, so a stage
  that saw the detail on another request counts this one as 0 cached, loadgen.stats.metrics
  ``cached_share``).
"""

from __future__ import annotations

from dataclasses import dataclass

USAGE, STREAM, APPORTIONED = "usage", "stream", "apportioned"  # where a request's reasoning count came from


def delta_parts(delta: dict) -> tuple[str | None, str | None]:
    """(reasoning text, answer text) of one chat delta, both spellings of reasoning read."""
    answer = delta.get("content")
    if answer and len(delta) == 1:  # the common chunk: {"content": "..."}, one lookup
        return None, answer
    return delta.get("reasoning_content") or delta.get("reasoning"), answer


def usage_reasoning_tokens(usage: dict) -> int | None:
    """``usage.completion_tokens_details.reasoning_tokens`` (OpenAI, vLLM), else
    ``usage.reasoning_tokens`` (SGLang puts it at the top level); None when both are absent or null."""
    details = usage.get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if not isinstance(value, int) or not value:  # SGLang's details (spec decoding) lack it
        top = usage.get("reasoning_tokens")
        value = top if isinstance(top, int) and (top or not isinstance(value, int)) else value
    return value if isinstance(value, int) else None


def usage_cached_tokens(usage: dict) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``, None when absent or null."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) else None


def stream_reasoning_tokens(has_answer: bool, chunk_tokens: int | None) -> int:
    """Reasoning tokens one chunk that carried reasoning text adds to the stream's count:
    ``chunk_tokens`` (per-chunk usage increase; None = unknown, count 1), less the one answer
    token a chunk that also carried answer text has at least."""
    n = 1 if chunk_tokens is None else chunk_tokens
    return max(n - 1, 0) if has_answer else n


def apportioned_reasoning_tokens(n_tokens: int, n_chunks: int, reasoning_chunks) -> int:
    """Reasoning tokens when usage gave only the total ``n_tokens`` over ``n_chunks`` content chunks:
    ``reasoning_chunks`` holds 2 i + a for each chunk i that carried reasoning text (a = 1 if it also
    carried answer text); chunk i has n_i = floor((i+1)N/C) - floor(iN/C) tokens (module docstring)."""
    total = 0
    for code in reasoning_chunks:
        i, has_answer = code >> 1, code & 1
        n = (i + 1) * n_tokens // n_chunks - i * n_tokens // n_chunks
        total += max(n - 1, 0) if has_answer else n
    return total


@dataclass(frozen=True, slots=True)
class AnswerFigures:
    """The answer's own figures of one request (formulas in the module docstring)."""

    ttfat_s: float | None
    reasoning_tokens: int
    reasoning_source: str | None  # USAGE | STREAM | APPORTIONED | None (no reasoning)
    answer_decode_tps: float | None


def answer_figures(sent_s: float, first_answer_t: float | None, last_answer_t: float | None,
                   n_tokens: int, usage_reasoning: int | None, stream_reasoning: int,
                   stream_source: str = STREAM) -> AnswerFigures:
    """Time to first answer token, reasoning tokens and their source, answer decode rate;
    ``stream_source``: how ``stream_reasoning`` was found (STREAM or APPORTIONED)."""
    if usage_reasoning:
        reasoning, source = usage_reasoning, USAGE
    else:
        reasoning, source = stream_reasoning, stream_source if stream_reasoning else None
    if first_answer_t is None:
        return AnswerFigures(None, reasoning, source, None)
    answer_tokens = n_tokens - reasoning
    span = last_answer_t - first_answer_t
    rate = (answer_tokens - 1) / span if answer_tokens >= 2 and span > 0 else None
    return AnswerFigures(first_answer_t - sent_s, reasoning, source, rate)
