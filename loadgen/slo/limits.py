"""Percentile limits of a stage: ``slo.ttft_p99_s: 2`` means "the stage's TTFT p99 <= 2 s".

Pure: no I/O, no clock. Beside the per-request objectives of ``loadgen.slo.objectives`` (a request meets
them or not, and a share of requests must), a scenario may state limits per metric and
percentile, the way MLPerf's server scenario and most SLO documents do. The key names both:
``slo.<metric>_p<percentile>_s``.

- metric: ``ttft`` (TTFT, one sample per ok request), ``tpot`` (TPOT = (E2E - TTFT) / (N - 1),
  one per ok request with N >= 2), ``itl`` (per-token ITL, one sample per token), ``e2e``
  (E2E, one per ok request): the StageStats LogHistograms behind the stage row's
  ``ttft_p99_s``, ``tpot_p50_s``, ``itl_p95_s``, ``e2e_p50_s`` (``HISTOGRAM_OF``).
- percentile: ``p50`` = 50 %, ``p99`` = 99 %; more than two digits read as decimals after the
  first two, ``p999`` = 99.9 %, ``p9999`` = 99.99 %, ``p995`` = 99.5 %. A trailing zero beyond two
  digits is refused (``p100`` would read as 10 %; ``p990`` is ``p99``).

The verdict (``judge``) is taken on the stage's histogram merged across every process, so it
is exact whatever the number of workers (bucket counts add up, ``loadgen.stats.hist``):

    measured = LogHistogram.quantile(percentile / 100)   (the sample of rank ceil(q x count),
               reported as the geometric middle of its bucket, clamped to [min, max]:
               relative error <= 10**0.005 - 1 = 1.16 %)
    pass     = measured <= limit   (equal passes); a histogram without samples passes (no TPOT
               when every request had one output token, as the per-request rule)

The 1.16 % error is two-sided: a stage whose true p99 lies within 1.16 % of the limit can be
judged either way. Histograms hold ok requests only; failed requests count against the stage
through its attainment (``loadgen.slo.objectives``: with percentile limits alone, the share of requests
that succeeded must reach ``slo.attainment``). A stage passes when its attainment and every
limit hold (``stage_limits``).

Limit sets (``slo.preset``, the key's name for a limit set): the published server-scenario limits of MLCommons MLPerf Inference
(``LIMIT_SETS``; each names its source). Keys set beside a limit set override its values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.errors import ConfigError

# metric in the key -> the StageStats LogHistogram it is judged on (declared in loadgen.stats.metrics)
HISTOGRAM_OF = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_token_s", "e2e": "e2e_s"}
METRIC_TEXT = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL per token", "e2e": "E2E"}

_KEY = re.compile(r"(?P<metric>[a-z0-9]+)_p(?P<digits>\d+)_s")
_LOOKS_LIKE = re.compile(r"[a-z0-9_]+_p[0-9][0-9._]*_s")  # what a user meant as a limit key

# MLCommons MLPerf Inference, loadgen/mlperf.conf (github.com/mlcommons/inference, read at commit
# 001712e9daf80386e0dda43f97b8f36981d792c4): "<model>.Server.ttft_latency" and "tpot_latency" in
# ms, judged at "*.Server.target_latency_percentile = 99".
MLPERF_SOURCE = ("MLPerf Inference loadgen/mlperf.conf (github.com/mlcommons/inference, commit 001712e9): "
                 "<model>.Server.ttft_latency / tpot_latency at target_latency_percentile 99")
_MLPERF_MS = {  # limit set name -> (TTFT p99 ms, TPOT p99 ms), the mlperf.conf model name in the comment
    "mlperf-llama2-70b": (2000, 200),  # llama2-70b
    "mlperf-llama2-70b-interactive": (450, 40),  # llama2-70b-interactive
    "mlperf-mixtral-8x7b": (2000, 200),  # mixtral-8x7b
    "mlperf-llama3.1-405b": (6000, 175),  # llama3_1-405b
    "mlperf-llama3.1-405b-interactive": (4500, 80),  # llama3_1-405b-interactive
    "mlperf-llama3.1-8b": (2000, 100),  # llama3_1-8b
    "mlperf-llama3.1-8b-interactive": (500, 30),  # llama3_1-8b-interactive
    "mlperf-deepseek-r1": (2000, 80),  # deepseek-r1
    "mlperf-deepseek-r1-interactive": (1500, 15),  # deepseek-r1-interactive
}
LIMIT_SETS: dict[str, dict[str, float]] = {
    name: {"ttft_p99_s": ttft / 1000, "tpot_p99_s": tpot / 1000} for name, (ttft, tpot) in _MLPERF_MS.items()
}


@dataclass(frozen=True)
class LimitKey:
    """A parsed limit key: ``metric`` (a HISTOGRAM_OF key) and ``percentile`` in percent."""

    metric: str
    percentile: float

    @property
    def q(self) -> float:
        return self.percentile / 100.0

    @property
    def text(self) -> str:
        """``TTFT p99``, ``ITL per token p99.9``."""
        return f"{METRIC_TEXT[self.metric]} p{self.percentile:g}"


def looks_like_limit_key(leaf: str) -> bool:
    """``leaf`` (the part after ``slo.``) is written as a percentile limit, valid or not."""
    return bool(_LOOKS_LIKE.fullmatch(leaf))


def parse_limit_key(key: str) -> LimitKey:
    """``slo.ttft_p99_s`` (or ``ttft_p99_s``) -> LimitKey("ttft", 99.0); ConfigError naming the
    key and the fix otherwise."""
    leaf = key.removeprefix("slo.")
    shown = f"slo.{leaf}"
    example = "e.g. slo.ttft_p99_s: 2, slo.tpot_p90_s: 0.05, slo.itl_p999_s: 0.2"
    m = _KEY.fullmatch(leaf)
    if m is None:
        if "." in leaf:
            raise ConfigError(shown, leaf, "a percentile cannot hold a dot in a key",
                              "write the digits without it: p999 for 99.9 %, p995 for 99.5 %")
        raise ConfigError(shown, leaf, "is not a percentile limit key <metric>_p<percentile>_s", example)
    metric, digits = m["metric"], m["digits"]
    if metric not in HISTOGRAM_OF:
        raise ConfigError(shown, leaf, f"unknown metric {metric!r} in a percentile limit",
                          f"use one of {', '.join(HISTOGRAM_OF)}, {example}")
    if len(digits) > 2 and digits.endswith("0"):
        raise ConfigError(shown, leaf, f"p{digits} is ambiguous (digits past the second are decimals: "
                          f"p{digits} would be {digits[:2]}.{digits[2:]} %)",
                          "write p99 for 99 %, p999 for 99.9 %; the worst gap is slo.itl_max_s")
    percentile = float(digits) if len(digits) <= 2 else float(f"{digits[:2]}.{digits[2:]}")
    if not 0 < percentile < 100:
        raise ConfigError(shown, leaf, "the percentile must be above 0 and below 100",
                          "e.g. p50, p90, p99, p999 (99.9 %)")
    return LimitKey(metric, percentile)


def limit_set_name(key: str, value: Any) -> str | None:
    """The ``slo.preset`` check: null or a name of ``LIMIT_SETS``."""
    if value is None or isinstance(value, str) and value in LIMIT_SETS:
        return value
    raise ConfigError(key, value, "is not a known limit set", "one of " + ", ".join(LIMIT_SETS) + ", or null")


def collect_limits(slo_doc: Mapping[str, Any], preset: str | None, check_value) -> tuple[tuple[str, float], ...]:
    """The limits of a scenario's ``slo`` mapping: the preset's, then every ``<metric>_p<N>_s``
    key (overriding the preset; null drops a limit). ``check_value(dotted key, value)`` checks a
    value (a number > 0 or null). Sorted by metric, then percentile: (key, limit in s)."""
    limits = dict(LIMIT_SETS[preset]) if preset else {}
    for leaf, value in slo_doc.items():
        if not looks_like_limit_key(str(leaf)):
            continue
        parse_limit_key(str(leaf))
        checked = check_value(f"slo.{leaf}", value)
        if checked is None:
            limits.pop(leaf, None)
        else:
            limits[leaf] = checked
    order = list(HISTOGRAM_OF)
    return tuple(sorted(limits.items(), key=lambda kv: (order.index(parse_limit_key(kv[0]).metric),
                                                        parse_limit_key(kv[0]).percentile)))


@dataclass(frozen=True)
class LimitVerdict:
    """One limit judged on one stage: the measured quantile, the limit, pass (measured <= limit)."""

    key: str
    limit_s: float
    measured_s: float | None  # None: the histogram had no sample
    samples: int
    passed: bool

    def to_dict(self) -> dict:
        return {"measured_s": self.measured_s, "limit_s": self.limit_s, "pass": self.passed,
                "samples": self.samples}


def judge(stats, limits: Iterable[tuple[str, float]]) -> list[LimitVerdict]:
    """Each limit against ``stats`` (a StageStats, merged across processes): the module
    docstring's rule, measured = quantile of the metric's LogHistogram, pass = measured <= limit."""
    out = []
    for key, limit in limits:
        lk = parse_limit_key(key)
        hist = getattr(stats, HISTOGRAM_OF[lk.metric])
        measured = hist.quantile(lk.q) if hist.count else None
        out.append(LimitVerdict(key, limit, measured, hist.count, measured is None or measured <= limit))
    return out


def stage_limits(slo: dict, stats, limits: Iterable[tuple[str, float]]) -> dict:
    """The stage's ``slo`` object (``loadgen.slo.objectives.stage_slo``) with its percentile limits:

    - ``limits``: {key: {measured_s, limit_s, pass, samples}}
    - ``failed``: what failed, ``attainment`` and/or the limit keys, in that order
    - ``pass``: the attainment target met and every limit held
    """
    verdicts = judge(stats, limits)
    failed = ([] if slo["pass"] else ["attainment"]) + [v.key for v in verdicts if not v.passed]
    return {**slo, "limits": {v.key: v.to_dict() for v in verdicts}, "failed": failed, "pass": not failed}


def failed_text(slo: dict) -> str:
    """What failed in a stage's ``slo`` (``stage_limits``), for a warning line:
    ``TTFT p99 2.31 s > 2 s (ttft_p99_s); attainment 97.0% below the target``."""
    parts = []
    for key in slo.get("failed") or []:
        if key == "attainment":
            att = slo.get("attainment")
            parts.append("attainment " + ("-" if att is None else f"{att:.1%}") + " below the target")
            continue
        v = slo["limits"][key]
        parts.append(f"{parse_limit_key(key).text} {_s(v['measured_s'])} > {_s(v['limit_s'])} ({key})")
    return "; ".join(parts)


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"
