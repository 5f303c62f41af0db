"""One request as one line of ``requests.jsonl`` (the per-request export): pure, no I/O, no clock.

The schema (docs/results.md "Per-request export" shows an example). Times are seconds; ``sent_unix_s`` is
wall-clock time, seconds since the Unix epoch (UTC), of when the request counted as sent (for an
open-loop request its scheduled arrival, as its TTFT and E2E are timed from it). Every key is on
every line; a figure the request does not have is null.

- ``run``: the run's name (summary.json ``run.name``)
- ``stage``: the stage index whose window the request was sent in, null outside the windows
  (warmup, ramp, drain, the start check's probes)
- ``phase``: ``"load"`` (sent by a user or the open-loop dispatcher) or ``"probe"`` (the start
  check's requests and the open-loop guard's duration sample, counted in the run's totals too)
- ``worker``: the process that sent it (a worker's client id; ``"local"`` in a local run)
- ``request_id``: ``<worker>/<n>``, n counting that process's requests from 1: unique in the run
- ``x_request_id``: the ``x-request-id`` header sent with the request (a uuid4 in hex, unique per
  request; vLLM and SGLang log it as the request's id); ``response_id``: the stream's ``id`` (from
  the first chunk that had one; vLLM ``cmpl-<x_request_id>`` / ``chatcmpl-...``), null when no
  chunk came: with them a line joins the server's logs
- ``sent_unix_s``, ``ttft_s``, ``ttfat_s`` (time to first answer token, after any thinking),
  ``e2e_s``
- ``input_tokens``: ``usage.prompt_tokens`` (null when the server sent no usage);
  ``input_tokens_asked``: the prompt length the client built
- ``output_tokens``: completion tokens (usage, else counted chunks: ``output_tokens_estimated``)
- ``cached_tokens``: ``usage.prompt_tokens_details.cached_tokens`` (null: not reported)
- ``reasoning_tokens`` (``reasoning_source``: ``usage`` | ``stream`` | ``apportioned`` | null), ``chunks``
- ``ok``, ``failure_kind`` (``loadgen.errors.FAILURE_KINDS``, null when ok), ``status`` (the HTTP
  status of a failure answered before the stream, else 200 once a chunk came, null when neither is
  known: a refused connection, a timeout before the first chunk), ``finish_reason``, ``turn`` (multi-turn: the turn, from 0; else null)
- ``model``: with a mix of models, the model the request asked for; else null (summary.json ``run.model``)
- ``replica``: with several replicas, the one that served it (docs/replicas.md); else null
"""

from __future__ import annotations

import json

FIELDS = ("run", "stage", "phase", "worker", "request_id", "x_request_id", "response_id", "sent_unix_s", "ttft_s", "ttfat_s", "e2e_s",
          "input_tokens", "input_tokens_asked", "output_tokens", "output_tokens_estimated", "cached_tokens",
          "reasoning_tokens", "reasoning_source", "chunks", "ok", "failure_kind", "status",
          "finish_reason", "turn", "model", "replica")
LOAD, PROBE = "load", "probe"  # the line's phase: sent by the load, or by the run's own checks
PHASES = (LOAD, PROBE)


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def request_fields(result, *, stage: int | None, phase: str, worker: str, n: int, sent_unix_s: float,
                   input_tokens_asked: int | None, turn: int | None = None, model: str | None = None,
                   replica: str | None = None) -> dict:
    """A ``loadgen.stats.records.RequestResult`` as the line's fields, all but ``run`` (the
    process that writes the file adds it: a worker may not know the run's name)."""
    status = result.error_status
    if status is None and (result.ok or result.chunks or result.ttft_s is not None):
        status = 200  # the stream started: the answer was 200, whatever happened next
    return {
        "stage": stage, "phase": phase, "worker": worker, "request_id": f"{worker}/{n}",
        "x_request_id": result.x_request_id, "response_id": result.response_id,
        "sent_unix_s": _r(sent_unix_s), "ttft_s": _r(result.ttft_s), "ttfat_s": _r(result.ttfat_s),
        "e2e_s": _r(result.e2e_s), "input_tokens": result.prompt_tokens,
        "input_tokens_asked": input_tokens_asked, "output_tokens": result.completion_tokens,
        "output_tokens_estimated": bool(result.tokens_estimated), "cached_tokens": result.cached_prompt_tokens,
        "reasoning_tokens": result.reasoning_tokens, "reasoning_source": result.reasoning_source,
        "chunks": result.chunks, "ok": bool(result.ok), "failure_kind": result.error_kind, "status": status,
        "finish_reason": result.finish_reason, "turn": turn, "model": model, "replica": replica,
    }


def request_line(run: str | None, fields: dict) -> str:
    """The JSON line (no newline) of ``fields`` (``request_fields``) in run ``run``, keys in
    ``FIELDS`` order."""
    line = {"run": run, **fields}
    return json.dumps({k: line.get(k) for k in FIELDS}, separators=(",", ":"))
