"""The server's own latency over one window: its histograms' delta between the two edge reads.

Pure: no I/O, no clock (edges from ``loadgen.server.window``). A window reader: ``latency(flavor,
opened, closed)`` gives the stage's ``server`` object one entry per part the server times, e.g.
``server["ttft"] = {"count", "mean_s", "p50_s", "p90_s", "p99_s"}`` and ``server["latency_labels"]``.

Histograms read (names as in vLLM ``vllm/v1/metrics/loggers.py`` and SGLang
``sglang/srt/metrics/collector.py``, late 2026; labels ``model_name`` + ``engine`` in vLLM,
``model_name`` + ``tp_rank``/``dp_rank``/... in SGLang):

=========  ============================================  =========================================
part       vLLM                                          SGLang
=========  ============================================  =========================================
ttft       time_to_first_token_seconds                   time_to_first_token_seconds
queue      request_queue_time_seconds                    queue_time_seconds
prefill    request_prefill_time_seconds                  -
decode     request_decode_time_seconds                   -
e2e        e2e_request_latency_seconds                   e2e_request_latency_seconds
itl        inter_token_latency_seconds (older:           inter_token_latency_seconds
           time_per_output_token_seconds)
=========  ============================================  =========================================

llama.cpp has counters only (``llamacpp:prompt_seconds_total`` / ``prompt_tokens_total``,
``tokens_predicted_seconds_total`` / ``tokens_predicted_total``): ``prompt_per_token`` and
``decode_per_token`` give means only (seconds per token over the window), no percentiles.

Formulas, per histogram, over the window:

- delta: closed - opened of every ``_bucket{le}``, ``_sum`` and ``_count``, each summed over label
  sets (engines, DP ranks, replicas; series differing only in a TP-rank label are one scheduler and
  counted once, ``answers.series_total``). ``latency_labels`` names the labels summed over. A
  bucket that went down (a restart) makes the part None.
- mean_s = delta sum / delta count (exact: no bucket error).
- pXX_s: as Prometheus' ``histogram_quantile``: rank = q x count; the first bucket whose
  cumulative count reaches the rank; linear interpolation between its lower and upper bound (the
  first bucket's lower bound is 0); a rank in the ``+Inf`` bucket gives the largest finite bound.
  The error left is up to the width of that bucket, reported as ``pXX_bucket_s`` (vLLM's TTFT
  buckets between 1 s and 2.5 s are 1.5 s wide; SGLang's start at 0.1 s), so the client's
  percentile minus the server's is trusted only to that width; the means carry no such error.

Window edges: a server observes a request when it happens (TTFT at the first token; queue,
prefill, decode and E2E when the request finishes; ITL per step), the client when the answer
reaches it. A request whose observation falls within the network delay (plus half a /metrics GET)
of an edge can be in one side's window and not the other's; the counts differ by about
rate x (delay + GET RTT / 2) at each edge, which is small against a stage's count
(``count`` is reported and compared with the client's: ``loadgen.analysis.breakdown.populations_agree``).
"""

from __future__ import annotations

import math

from loadgen.server.edges import Edge
from loadgen.server.replies import REPLICA_LABELS, Samples, series_total

QUANTILES = (("p50_s", 0.5), ("p90_s", 0.9), ("p99_s", 0.99))
HISTOGRAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "ttft": ("vllm:time_to_first_token_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
        "prefill": ("vllm:request_prefill_time_seconds",),
        "decode": ("vllm:request_decode_time_seconds",),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    },
    "sglang": {
        "ttft": ("sglang:time_to_first_token_seconds",),
        "queue": ("sglang:queue_time_seconds",),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "itl": ("sglang:inter_token_latency_seconds",),
    },
}
# llama.cpp: part -> (seconds counter, tokens counter); mean = seconds delta / tokens delta
LLAMACPP_COUNTERS = {
    "prompt_per_token": ("llamacpp:prompt_seconds_total", "llamacpp:prompt_tokens_total"),
    "decode_per_token": ("llamacpp:tokens_predicted_seconds_total", "llamacpp:tokens_predicted_total"),
}


def _le(labels: dict[str, str]) -> float:
    return math.inf if labels["le"] in ("+Inf", "inf", "Inf") else float(labels["le"])


def _buckets(samples: Samples, name: str) -> dict[float, float] | None:
    """{upper bound: cumulative count summed over label sets}, only bounds every label set has."""
    series = samples.get(name + "_bucket")
    if not series:
        return None
    by_le: dict[float, list] = {}
    for labels, value in series:
        if "le" in labels:
            by_le.setdefault(_le(labels), []).append(({k: v for k, v in labels.items() if k != "le"}, value))
    if not by_le:
        return None
    sets = max(len(v) for v in by_le.values())
    out = {le: series_total(v) for le, v in by_le.items() if len(v) == sets}
    return {le: v for le, v in out.items() if v is not None} or None


def _total(samples: Samples, name: str) -> float | None:
    series = samples.get(name)
    return series_total(series) if series else None


def _rise(opened: Edge | None, closed: Edge | None, name: str) -> float | None:
    """A counter's rise over the window, None if missing or it went down (``window.counter_delta``,
    which this module cannot import)."""
    a, b = (_total(e.samples, name) if e is not None else None for e in (opened, closed))
    return b - a if a is not None and b is not None and b >= a else None


def summed_labels(samples: Samples, name: str) -> list[str]:
    """The labels whose values differ between the series of ``name``: what the sum runs over."""
    values: dict[str, set] = {}
    for labels, _ in samples.get(name + "_count", []):
        for k, v in labels.items():
            values.setdefault(k, set()).add(v)
    return sorted(k for k, v in values.items() if len(v) > 1 and k not in REPLICA_LABELS)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative ``buckets`` [(upper bound, count)], sorted,
    the last bound +Inf: linear within the bucket that holds rank q x count (lower bound 0 for the
    first bucket); a rank in the +Inf bucket gives the largest finite bound. None without samples."""
    return quantile_and_bucket(q, buckets)[0]


def quantile_and_bucket(q: float, buckets: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """(histogram_quantile, the width of the bucket it interpolated in: its error bound; None for
    the +Inf bucket, where the true value can be anything above the returned bound)."""
    if not buckets or buckets[-1][1] <= 0:
        return None, None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, cum in buckets:
        if cum >= rank and cum > below:
            if math.isinf(upper):
                return (lower if len(buckets) > 1 else None), None
            if upper <= 0:
                return upper, 0.0
            return lower + (upper - lower) * (rank - below) / (cum - below), upper - lower
        lower, below = upper, cum
    return lower, None


def histogram_delta(opened: Edge, closed: Edge, name: str) -> dict | None:
    """One histogram over the window: ``count``, ``mean_s``, ``p50_s``, ``p90_s``, ``p99_s``; None
    when either edge lacks it or a figure went down (a restart)."""
    a, b = _buckets(opened.samples, name), _buckets(closed.samples, name)
    sa, sb = _total(opened.samples, name + "_sum"), _total(closed.samples, name + "_sum")
    if a is None or b is None or sa is None or sb is None or math.inf not in b:
        return None
    delta = sorted((le, b[le] - a[le]) for le in b if le in a)
    if not delta or any(d < 0 for _, d in delta) or sb < sa or delta[-1][0] != math.inf:
        return None
    count = delta[-1][1]
    out = {"count": int(count), "mean_s": (sb - sa) / count if count else None}
    for key, q in QUANTILES:
        out[key], out[key[:-2] + "_bucket_s"] = quantile_and_bucket(q, delta)
    return out


def latency(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """The window reader: one entry per part the flavor times (None where the server does not
    export it); nothing at all for a server without latency figures (or an edge missing), so its
    stage rows stay as they were."""
    if flavor == "llamacpp":
        out = {}
        for part, (seconds, tokens) in LLAMACPP_COUNTERS.items():
            s, n = _rise(opened, closed, seconds), _rise(opened, closed, tokens)
            out[part] = {"count": int(n), "mean_s": s / n} if s is not None and n else None
        return out if any(out.values()) else {}
    names = HISTOGRAMS.get(flavor or "")
    if names is None:
        return {}
    out: dict = {}
    labels: set[str] = set()
    for part, candidates in names.items():
        found = next((n for n in candidates if opened is not None and n + "_count" in opened.samples), None)
        out[part] = histogram_delta(opened, closed, found) if found and closed is not None else None
        if out[part] is not None:
            out[part]["metric"] = found
            labels.update(summed_labels(closed.samples, found))
    if not any(out.values()):
        return {}
    out["latency_labels"] = ",".join(sorted(labels)) or None
    return out
