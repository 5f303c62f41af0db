"""Service-level objectives: per-request verdicts, their counts, per-stage attainment and goodput.

Pure: no I/O, no clock. A request *meets* the objectives when every threshold that is set holds:

- ``ttft_s``:    TTFT <= ttft_s
- ``tpot_s``:    TPOT <= tpot_s (a request with fewer than 2 output tokens has no TPOT: met)
- ``e2e_s``:     E2E <= e2e_s
- ``itl_max_s``: the worst gap inside the request, max over chunks of t(chunk i) - t(chunk i-1),
                 <= itl_max_s (a stall the user sees; per chunk, because a user sees chunks)

A failed request (any error kind, overload included) meets none of them. Per stage, over the
requests measured in its window (sent while it was measured, ok or failed):

- attainment          = requests meeting every objective / requests (ok + failed; ``judged``)
- attainment of X     = requests meeting objective X / requests
- goodput (tok/s)     = output tok/s x met output tokens / measured output tokens
- goodput (req/s)     = output tok/s x met requests / measured output tokens
- pass                = attainment >= ``attainment`` (0.99 by default: a p99 constraint)

where output tok/s is the stage's (tokens arriving inside the window / window seconds) and the
measured output tokens are those of the stage's requests, ok and failed: goodput is the share of
the stage's token stream that conforming requests produced (= output tok/s when every request
meets the objectives), and in requests that stream divided by tokens per request. Not "met
requests / window seconds": a stage's requests are those *sent* in its window, and users that run
in step (fixed-length requests) send them in cohorts, so that count swings with where the window
falls in the cohort cycle (on the demo, 129 requests of 1000 tokens in a 6 s window at C=128:
21.5k tok/s against the 30k measured, with every request meeting the objectives).

This differs from "p99 TTFT <= X and p99 TPOT <= Y" of a stage: attainment is joint (one request
must meet all objectives at once) and failed requests count against it. Limits of that kind
(``slo.ttft_p99_s``, ``slo.preset``) are ``loadgen.slo.limits``: judged on the stage's merged
histograms beside the attainment (with them alone, a request "meets the objectives" when it
succeeded), and a stage passes only if both hold.

Counts are integers, so the merge across workers is exact (``SloCounts.merge``); the figures are
derived from merged counts only, never averaged. ``judged`` counts the requests given a verdict
(ok + failed, while objectives are set), so merged counts say by themselves whether SLO
accounting was on (judged 0: no figure, rather than a misleading 0 %).

The search for the largest passing load is ``loadgen.slo.search``; limits on a stage's
percentiles are ``loadgen.slo.limits``; the early stop of a stage ``loadgen.slo.early``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.slo.limits import LIMIT_SETS

OBJECTIVES = ("ttft_s", "tpot_s", "e2e_s", "itl_max_s")


@dataclass(frozen=True)
class Objectives:
    """The ``slo:`` block of a scenario. No threshold set: SLO accounting is off."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_max_s: float | None = None
    attainment: float = 0.99
    search: bool = False
    resolution: float = 0.1  # the search stops when first failing - last passing <= resolution x last passing
    max_search_stages: int = 4
    early_stop: bool = False  # close a stage's window once its verdict is decided (loadgen.slo.early)
    confidence: float = 0.95  # ... with this confidence: P(wrong early verdict) <= 1 - confidence
    preset: str | None = None  # named percentile limits (loadgen.slo.limits.LIMIT_SETS)
    # percentile limits (loadgen.slo.limits): (key, limit s), e.g. ("ttft_p99_s", 2.0); in the
    # scenario they are keys of the slo section (``flatten``: the method giving them), not a mapping
    limits: tuple[tuple[str, float], ...] = field(default=(), metadata={"flatten": "limit_keys"})

    def limit_keys(self) -> dict[str, float | None]:
        """The limits as keys of the scenario's slo section: each limit, and null for a preset's
        limit that was dropped (so the written scenario reads back to the same limits)."""
        dropped = {k: None for k in LIMIT_SETS.get(self.preset or "", {}) if k not in dict(self.limits)}
        return {**dict(self.limits), **dropped}

    @property
    def thresholds(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in OBJECTIVES if getattr(self, k) is not None}

    @property
    def enabled(self) -> bool:
        """Any objective set: a per-request threshold or a percentile limit."""
        return bool(self.thresholds or self.limits)


def request_verdict(result, objectives: Objectives) -> tuple[bool, tuple[str, ...]]:
    """(meets every objective, the objectives it meets) for one RequestResult."""
    th = objectives.thresholds
    if not result.ok:
        return False, ()
    met = []
    for key, limit in th.items():
        if key == "ttft_s":
            ok = result.ttft_s is not None and result.ttft_s <= limit
        elif key == "tpot_s":
            ok = result.tpot_s is None or result.tpot_s <= limit
        elif key == "e2e_s":
            ok = result.e2e_s is not None and result.e2e_s <= limit
        else:
            gaps = result.itl_chunk_s
            ok = not len(gaps) or float(gaps.max()) <= limit
        if ok:
            met.append(key)
    return len(met) == len(th), tuple(met)


@dataclass
class SloCounts:
    """Mergeable per-stage counts behind attainment and goodput."""

    met: int = 0  # requests meeting every objective
    met_output_tokens: int = 0  # their output tokens
    met_by: dict[str, int] = field(default_factory=dict)  # objective -> requests meeting it
    judged: int = 0  # requests given a verdict (ok + failed)

    def add(self, result, objectives: Objectives) -> None:
        self.count(result, request_verdict(result, objectives))

    def count(self, result, verdict: tuple[bool, tuple[str, ...]]) -> None:
        """Count one request whose ``request_verdict`` was already computed (once per request)."""
        every, met = verdict
        self.judged += 1
        if every:
            self.met += 1
            self.met_output_tokens += result.completion_tokens
        for key in met:
            self.met_by[key] = self.met_by.get(key, 0) + 1

    def merge(self, other: SloCounts) -> None:
        self.met += other.met
        self.met_output_tokens += other.met_output_tokens
        self.judged += other.judged
        for key, n in other.met_by.items():
            self.met_by[key] = self.met_by.get(key, 0) + n

    def is_empty(self) -> bool:
        return not (self.judged or self.met or self.met_output_tokens or self.met_by)

    def to_message(self) -> dict:
        return {"m": self.met, "t": self.met_output_tokens, "b": dict(self.met_by), "j": self.judged}

    @classmethod
    def from_message(cls, d: dict) -> SloCounts:
        by = {str(k): int(v) for k, v in d.get("b", {}).items()}
        unknown = set(by) - set(OBJECTIVES)
        if unknown:
            raise ValueError(f"unknown SLO objective(s) {sorted(unknown)} in wire data")
        return cls(int(d.get("m", 0)), int(d.get("t", 0)), by, int(d.get("j", 0)))


def goodput_per_s(count: int, tokens_per_s: float | None, measured_output_tokens: int) -> float | None:
    """tokens_per_s x count / measured_output_tokens (module docstring); None without a rate."""
    if tokens_per_s is None:
        return None
    return tokens_per_s * count / measured_output_tokens if measured_output_tokens else 0.0


def stage_slo(counts: SloCounts, requests: int, objectives: Objectives, tokens_per_s: float | None,
              measured_output_tokens: int) -> dict:
    """The stage's ``slo`` object (formulas in the module docstring). ``requests`` = ok + failed;
    ``tokens_per_s`` = the stage's output tok/s; ``measured_output_tokens`` = its requests' (ok and
    failed) output tokens."""
    share = (lambda n: n / requests) if requests else (lambda n: None)
    attainment = share(counts.met)
    return {
        "attainment": attainment,
        "attainment_by": {k: share(counts.met_by.get(k, 0)) for k in objectives.thresholds},
        "goodput_requests_per_s": goodput_per_s(counts.met, tokens_per_s, measured_output_tokens),
        "goodput_output_tokens_per_s": goodput_per_s(counts.met_output_tokens, tokens_per_s,
                                                     measured_output_tokens),
        "met_requests": counts.met,
        "pass": attainment is not None and attainment >= objectives.attainment,
    }
