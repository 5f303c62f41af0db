"""The saturation knee of a sweep: where more concurrency stops buying throughput (closed loop),
or the highest offered request rate the server sustains (open loop).

Pure: no I/O, no clock. Works on summary.json stage dicts (``concurrency``,
``output_tokens_per_s``, ``requests``, ``error_count``; open loop ``offered_rate_per_s``,
``achieved_rate_per_s``, ``ttft_p50_s``); ``knee_of`` on a whole summary.
"""

from __future__ import annotations

import math

from loadgen.stats.stage_load import is_rate_run, load_label, stage_label

DEFAULT_THRESHOLD = 0.10


def gain_per_doubling(c_a: float, tput_a: float, c_b: float, tput_b: float) -> float:
    """Relative throughput gain per doubling of concurrency between two stages.

        gain = (tput_b / tput_a) ** (1 / log2(c_b / c_a)) - 1

    So stages need not be exact doublings: going from C=4 to C=16 (two doublings) with a 2.25x
    throughput is a 50% gain per doubling. A fall in throughput gives a negative gain; a fall to
    zero gives -1. Requires ``c_b > c_a > 0`` and ``tput_a > 0``.
    """
    doublings = math.log2(c_b / c_a)
    return (tput_b / tput_a) ** (1.0 / doublings) - 1.0


def _curve(stages: list[dict]) -> list[tuple[float, float]]:
    """(concurrency, throughput) points usable for the knee, sorted by concurrency.

    Skipped: SLO search stages (``search: true``: they refine the SLO answer between the sweep's
    stages; the knee is the sweep's, the same with or without a search), stages without a positive
    concurrency or a throughput value, and stages that measured nothing (zero throughput with no requests and no errors: an empty window says nothing about
    the server). A stage with zero throughput *and* errors is kept at 0: the server broke there,
    which is the strongest possible "no gain". Repeated concurrencies keep the last stage.
    """
    points: dict[float, float] = {}
    for stage in stages:
        if stage.get("search"):
            continue
        c = stage.get("concurrency")
        tput = stage.get("output_tokens_per_s")
        if not c or c <= 0 or tput is None or tput < 0:
            continue
        if tput == 0 and not stage.get("requests") and not stage.get("error_count"):
            continue
        points[float(c)] = float(tput)
    return sorted(points.items())


def find_knee(stages: list[dict], threshold: float = DEFAULT_THRESHOLD) -> int | None:
    """Concurrency of the stage after which more concurrency adds less than ``threshold`` throughput.

    Rule: with stages sorted by concurrency, the knee is the lowest-concurrency stage k (with
    positive throughput) such that, for *every* later stage j,

        gain_per_doubling(k, j) = (tput_j / tput_k) ** (1 / log2(c_j / c_k)) - 1 < threshold

    i.e. no later stage beats stage k by ``threshold`` (10%) or more per doubling of concurrency.
    Comparing against every later stage, not only the next one, keeps a one-stage plateau followed
    by a real rise (noise, a warm-up effect) from being called the knee. Consequences:

    - a curve that rises then flattens -> the first stage of the flat part;
    - a curve that peaks then falls -> the peak, or the start of the plateau before it;
    - a stage where every request failed (throughput 0 with errors) counts as a fall to 0;
    - a curve still rising at the last stage -> None (not saturated within the sweep);
    - the last stage is never the knee: nothing after it shows the gain stopped.
    """
    if threshold <= 0:
        raise ValueError(f"knee threshold must be > 0, got {threshold!r} (use 0.1 for 10% per doubling)")
    curve = _curve(stages)
    for k, (c_k, tput_k) in enumerate(curve[:-1]):
        if tput_k <= 0:
            continue
        later = curve[k + 1 :]
        if all(gain_per_doubling(c_k, tput_k, c_j, tput_j) < threshold for c_j, tput_j in later):
            return int(c_k)
    return None


LATENCY_GROWTH = 5.0  # open loop: TTFT p50 this many times the lowest rate's -> no longer sustained


def unsustained_reason(stage: dict, base_ttft_s: float | None, threshold: float = DEFAULT_THRESHOLD,
                       latency_growth: float = LATENCY_GROWTH) -> str | None:
    """Why an open-loop stage is not sustained, or None when the server keeps up with its rate:

        achieved_rate_per_s >= (1 - threshold) x offered_rate_per_s
        and ttft_p50_s (from the scheduled send) <= latency_growth x base_ttft_s

    (base: the lowest rate's TTFT p50). The first fails when completions fall behind arrivals
    (the queue grows through the window); the second when requests still finish at the offered
    rate but wait longer and longer for their first token (a queue in front of a server that is
    not yet slower per request). A stage without an achieved rate is not judged (None).
    """
    offered, achieved = stage.get("offered_rate_per_s"), stage.get("achieved_rate_per_s")
    if not offered or achieved is None:
        return None
    if achieved < (1 - threshold) * offered:
        return f"the server achieved {load_label(achieved, rate=True)}, under {1 - threshold:.0%} of the offered rate"
    ttft = stage.get("ttft_p50_s")
    if base_ttft_s and ttft is not None and ttft > latency_growth * base_ttft_s:
        return f"TTFT p50 was {ttft / base_ttft_s:.1f}x the lowest rate's (a queue growing without bound)"
    return None


def _rate_knee_of(stages: list[dict], threshold: float, latency_growth: float
                  ) -> tuple[list[dict], int | None, str | None]:
    """(the rate stages by offered rate, SLO search stages left out; the index of the first not
    sustained, or None; why it is not)."""
    rated = sorted((s for s in stages if s.get("offered_rate_per_s") and not s.get("search")),
                   key=lambda s: s["offered_rate_per_s"])
    base = next((s["ttft_p50_s"] for s in rated if s.get("ttft_p50_s")), None)
    for i, stage in enumerate(rated):
        if (why := unsustained_reason(stage, base, threshold, latency_growth)) is not None:
            return rated, i, why
    return rated, None, None


def find_rate_knee(stages: list[dict], threshold: float = DEFAULT_THRESHOLD,
                   latency_growth: float = LATENCY_GROWTH) -> float | None:
    """Offered rate of the last stage the server sustains before the first it does not
    (``unsustained_reason``, stages by offered rate): the highest rate it holds. None when every
    stage is sustained (not saturated within the sweep) or the first one is not (saturated from
    the start).
    """
    rated, first_bad, _ = _rate_knee_of(stages, threshold, latency_growth)
    return rated[first_bad - 1]["offered_rate_per_s"] if first_bad else None


def rate_knee_text(stages: list[dict], threshold: float = DEFAULT_THRESHOLD,
                   latency_growth: float = LATENCY_GROWTH) -> str | None:
    """The open-loop knee said with its evidence (None without rate stages), one of:

    - ``4 req/s (the highest offered rate sustained; at 8 req/s the server achieved 5.1 req/s,
      under 90% of the offered rate)``, or the TTFT growth that failed the next stage;
    - ``none found (every offered rate up to 16 req/s was sustained)``;
    - ``none found (already the lowest offered rate, 1 req/s, was not sustained: ...)``.
    """
    rated, first_bad, why = _rate_knee_of(stages, threshold, latency_growth)
    if not rated:
        return None
    if first_bad is None:
        return f"none found (every offered rate up to {stage_label(rated[-1])} was sustained)"
    if first_bad == 0:
        return f"none found (already the lowest offered rate, {stage_label(rated[0])}, was not sustained: {why})"
    return (f"{stage_label(rated[first_bad - 1])} (the highest offered rate sustained; "
            f"at {stage_label(rated[first_bad])} {why})")


def run_knee(stages: list[dict], open_loop: bool, threshold: float = DEFAULT_THRESHOLD) -> float | None:
    """A run's knee: the highest offered rate sustained (open loop, ``find_rate_knee``), else the
    concurrency knee (``find_knee``)."""
    return find_rate_knee(stages, threshold) if open_loop else find_knee(stages, threshold)


def knee_of(summary: dict) -> float | None:
    """The knee recorded in the summary (``knee.rate_per_s`` of an open-loop run, else
    ``knee.concurrency``); computed from the stages when the summary has none."""
    knee = summary.get("knee") if isinstance(summary.get("knee"), dict) else {}
    rate = is_rate_run(summary)
    key = "rate_per_s" if rate else "concurrency"
    if key in knee:
        return knee[key]
    return run_knee(summary.get("stages") or [], rate, knee.get("threshold", DEFAULT_THRESHOLD))
