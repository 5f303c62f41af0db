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
- scheduled_rate_per_s = arrivals that came due in the window (sent + dropped) / window_s;
  dropped_by_client = arrivals not sent because ``rate.max_inflight`` were in flight (open loop)
- SLO: ``loadgen.stats.slo.request_verdict`` per request, ``stage_slo`` per stage; percentile limits
  (``loadgen.stats.slo_limits.stage_limits``) on LogHistograms of the stage's ok requests, as a run

Quantiles are the client's: each figure of ``loadgen.stats.metrics.STAGE_METRICS`` drawn from a
per-request histogram is that metric's ``value`` on LogHistograms of the stage's requests (the
sample of rank ceil(q x count), within one fine bucket), as a run's stage row. Not numpy's linear
interpolation: where a stage's TTFTs fall in two modes (half the prompts alone, half behind
another), the middle of the gap between them is a value no request had and no run reports.
Each row carries ``predicted: true`` and the flag ``predicted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from loadgen.errors import HTTP_4XX, OVERLOAD_503
from loadgen.predict.vsweep import StageRecord, Timing
from loadgen.stats.hist import LogHistogram
from loadgen.stats.metrics import DECODE_TPS, E2E, ITL_CHUNK, ITL_TOKEN, STAGE_METRICS, TPOT, TTFT
from loadgen.stats.slo import Objectives, SloCounts, stage_slo
from loadgen.stats.slo_limits import stage_limits

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


# the per-request histograms of a stage (loadgen.stats.metrics), filled from the simulated timings
SAMPLED = (TTFT, TPOT, E2E, DECODE_TPS, ITL_TOKEN, ITL_CHUNK)


def _histograms(ok: list[_Result], chunk_gaps: np.ndarray, chunk_n: np.ndarray) -> SimpleNamespace:
    """The stage's LogHistograms as a run fills them (loadgen.stats.records): one TTFT, E2E, TPOT
    and decode-rate sample per ok request (TPOT and decode rate of requests with N > 1), one chunk
    gap per gap, and per-token ITL gap_i / n_i weighted by n_i."""
    hists = {h.attr: LogHistogram() for h in SAMPLED}
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    for h, values in ((TTFT, [r.ttft_s for r in ok]), (E2E, [r.e2e_s for r in ok]), (TPOT, tpot),
                      (DECODE_TPS, [1.0 / x for x in tpot if x > 0]), (ITL_CHUNK, chunk_gaps)):
        hists[h.attr].add_many(values)
    n = np.maximum(chunk_n, 1).astype(np.int64)
    hists[ITL_TOKEN.attr].add_many(chunk_gaps / n, n)
    return SimpleNamespace(**hists)


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
    hists = _histograms(ok, chunk_gaps, chunk_n)
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
        **{m.key: m.value(hists, w) for m in STAGE_METRICS if m.source in SAMPLED},
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "token_mismatch": {"input": 0, "output": 0, "estimated": 0},
    }
    if rec.rate_per_s is not None:
        row.update({"concurrency": None, "offered_rate_per_s": rec.rate_per_s,
                    "achieved_rate_per_s": rec.window_finished / w if w else None,
                    "scheduled_rate_per_s": rec.scheduled / w if w else None,
                    "dropped_by_client": rec.dropped})
    row["server"] = {"preemptions": rec.preemptions, "waiting_max": rec.peak_waiting,
                     "running_max": rec.peak_running,
                     "kv_usage_max": rec.peak_kv_tokens / kv_tokens if kv_tokens else None}
    flags = [PREDICTED_FLAG]
    if objectives is not None and objectives.enabled:
        counts = SloCounts()
        for r in results:
            counts.add(r, objectives)
        row["slo"] = stage_slo(counts, len(results), objectives, row["output_tokens_per_s"], tokens)
        if objectives.limits:  # judged as a run judges them: on the stage's LogHistograms
            row["slo"] = stage_limits(row["slo"], hists, objectives.limits)
        row["slo_attainment"] = row["slo"]["attainment"]
        row["goodput_output_tokens_per_s"] = row["slo"]["goodput_output_tokens_per_s"]
        if not row["slo"]["pass"]:
            flags.append("slo_fail")
    if unfinished:
        row["unfinished_requests"] = unfinished
        flags.append("drain_timeout")
    if rec.search:
        flags.append("slo_search")
    row.update({"search": rec.search, "users": rec.concurrency, "window_s": w, "flags": flags})
    return row
