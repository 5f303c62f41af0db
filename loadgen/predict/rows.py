"""Predicted stage rows: a virtual stage's requests turned into summary.json's stage fields.

Pure. The formulas are the client's (``loadgen.stats.records``, ``loadgen.stats.metrics``), applied
to the simulated timings of the requests *sent* in the window (``loadgen.predict.vsweep``):

- input_tokens = the sum of each finished request's own prompt tokens; output_tokens = the sum of
  the tokens each one received (requests of mixed lengths: from the requests, not from one N)
- output_tokens_per_s = output tokens whose chunk arrived in the window / window_s
- TTFT = t(first chunk) - t(sent); E2E = t(last chunk) - t(sent); TPOT = (E2E - TTFT) / (N - 1)
- per-token ITL: gap_i / n_i, weighted by n_i; chunk gap p50 over the gaps themselves
- decode rate = (N - 1) / (E2E - TTFT); tokens_per_chunk = tokens / chunks
- achieved_rate_per_s = requests finished in the window (sent in it or before) / window_s (open loop)
- SLO: ``loadgen.stats.slo.request_verdict`` per request, ``stage_slo`` per stage

Quantiles are exact (numpy, linear interpolation), not the client's log histogram (within ~1 %).
Each row carries ``predicted: true`` and the flag ``predicted``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.errors import HTTP_4XX, OVERLOAD_503
from loadgen.predict.vsweep import StageRecord, Timing
from loadgen.stats.slo import Objectives, SloCounts, stage_slo

PREDICTED_FLAG = "predicted"


@dataclass
class _Result:
    """The fields of a RequestResult that ``request_verdict`` reads."""

    ok: bool
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    itl_chunk_s: np.ndarray
    completion_tokens: int


def _q(values, q: float) -> float | None:
    return float(np.quantile(values, q)) if len(values) else None


def _wq(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """Weighted quantile: the smallest value whose cumulative weight reaches q of the total."""
    if not len(values):
        return None
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, q * cum[-1])])


def _result(t: Timing) -> _Result:
    gaps = np.diff(np.asarray(t.chunk_t)) if len(t.chunk_t) > 1 else np.empty(0)
    return _Result(t.done and not t.failed and t.tokens > 0, t.ttft_s, t.tpot_s, t.e2e_s, gaps, t.tokens)


def stage_row(rec: StageRecord, kv_tokens: int, objectives: Objectives | None = None) -> dict:
    """The predicted summary.json row of one virtual stage (token counts from its own requests)."""
    results = [_result(t) for t in rec.requests]
    ok = [r for r in results if r.ok]
    gaps = [(np.diff(np.asarray(t.chunk_t)), np.asarray(t.chunk_n[1:])) for t in rec.requests if len(t.chunk_t) > 1]
    chunk_gaps = np.concatenate([g for g, _ in gaps]) if gaps else np.empty(0)
    chunk_n = np.concatenate([n for _, n in gaps]) if gaps else np.empty(0)
    ttft = [r.ttft_s for r in ok]
    e2e = [r.e2e_s for r in ok]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    decode = [1.0 / x for x in tpot if x > 0]
    tokens = sum(r.completion_tokens for r in ok)
    chunks = sum(len(t.chunk_t) for t in rec.requests if t.done)
    w = rec.window_s
    rejected = sum(1 for t in rec.requests if t.rejected)  # max_queued: a 503 over HTTP
    too_long = sum(1 for t in rec.requests if t.too_long)  # above max_model_len: a 400
    errors = {k: n for k, n in ((OVERLOAD_503, rejected), (HTTP_4XX, too_long)) if n}
    unfinished = sum(1 for t in rec.requests if not t.done)  # still running when the prediction stopped
    row = {
        "index": rec.index,
        "concurrency": rec.concurrency,
        "predicted": True,
        "requests": len(ok),
        "errors": errors,
        "error_count": rejected + too_long,
        "input_tokens": sum(t.input_tokens for t, r in zip(rec.requests, results, strict=True) if r.ok),
        "output_tokens": tokens,
        "output_tokens_per_s": rec.window_tokens / w if w else None,
        "decode_tps_p50": _q(decode, 0.5),
        **{f"ttft_p{p}_s": _q(ttft, p / 100) for p in (50, 90, 95, 99)},
        **{f"itl_p{p}_s": _wq(chunk_gaps / np.maximum(chunk_n, 1), chunk_n, p / 100) for p in (50, 90, 95, 99)},
        "itl_chunk_p50_s": _q(chunk_gaps, 0.5),
        "tpot_p50_s": _q(tpot, 0.5),
        "e2e_p50_s": _q(e2e, 0.5),
        "e2e_p99_s": _q(e2e, 0.99),
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "token_mismatch": {"input": 0, "output": 0, "estimated": 0},
    }
    if rec.rate_per_s is not None:
        row.update({"concurrency": None, "offered_rate_per_s": rec.rate_per_s,
                    "achieved_rate_per_s": rec.window_finished / w if w else None})
    row["server"] = {"preemptions": rec.preemptions, "waiting_max": rec.peak_waiting,
                     "running_max": rec.peak_running,
                     "kv_usage_max": rec.peak_kv_tokens / kv_tokens if kv_tokens else None}
    flags = [PREDICTED_FLAG]
    if objectives is not None and objectives.enabled:
        counts = SloCounts()
        for r in results:
            counts.add(r, objectives)
        row["slo"] = stage_slo(counts, len(results), objectives, row["output_tokens_per_s"], tokens)
        row["slo_attainment"] = row["slo"]["attainment"]
        row["goodput_output_tokens_per_s"] = row["slo"]["goodput_output_tokens_per_s"]
        if not row["slo"]["pass"]:
            flags.append("slo_fail")
    if unfinished:
        row["unfinished_requests"] = unfinished
        flags.append("drain_timeout")
    row.update({"search": False, "users": rec.concurrency, "window_s": w, "flags": flags})
    return row
