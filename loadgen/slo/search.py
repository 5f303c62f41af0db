"""The SLO search: the largest load that meets the objectives, and summary.json's ``slo`` summary.

Pure: no I/O, no clock. The search (``next_search_concurrency``) runs after the whole geometric
sweep, never instead of its upper stages: the knee and the KV ceiling need those stages, and
attainment need not fall monotonically with concurrency (a stage above a failing one may pass), so
stopping at the first failure could miss the largest passing stage. Every search stage is decided
from final stages only (all their requests finished), because pass/fail is known only then.
"""

from __future__ import annotations

from loadgen.slo.objectives import Objectives


def bracket(outcomes: list[tuple[int, bool]]) -> tuple[int | None, int | None]:
    """[last passing, first failing above it] from (concurrency, passed) of every measured stage.

    last passing = the largest concurrency measured to pass (None: none passed);
    first failing = the smallest failing concurrency above it (None: open above).
    """
    passing = [c for c, ok in outcomes if ok]
    lo = max(passing) if passing else None
    above = [c for c, ok in outcomes if not ok and (lo is None or c > lo)]
    return lo, (min(above) if above else None)


def converged(lo: float | None, hi: float | None, resolution: float, rate: bool = False) -> bool:
    """Nothing left to refine: no closed bracket, or hi - lo <= max(1, resolution x lo) (a rate
    bracket, ``rate``: hi - lo <= resolution x lo; a rate has no smallest step)."""
    if lo is None or hi is None:
        return True
    return hi - lo <= (resolution * lo if rate else max(1.0, resolution * lo))


def next_search_concurrency(outcomes: list[tuple[float, bool]], objectives: Objectives,
                            search_stages_run: int, rate: bool = False) -> float | None:
    """The next load the search should measure, or None when it is done.

    Bisection of the bracket at its midpoint, (lo + hi) // 2 users, or for an open-loop rate
    sweep (``rate``) (lo + hi) / 2 requests/s to 3 significant digits (as every view writes a
    rate), while it is wider than the resolution and fewer than ``max_search_stages`` search
    stages ran.
    """
    if not objectives.search or search_stages_run >= objectives.max_search_stages:
        return None
    lo, hi = bracket(outcomes)
    if converged(lo, hi, objectives.resolution, rate):
        return None
    mid = float(f"{(lo + hi) / 2:.3g}") if rate else (lo + hi) // 2
    return mid if lo < mid < hi else None


def slo_summary(outcomes: list[tuple[int, bool]], objectives: Objectives,
               search_concurrencies: list[int], load: str = "concurrency") -> dict:
    """summary.json's top-level ``slo``: objectives, max_concurrency, bracket, the search. ``load``:
    what the bracket and the search stages are in, ``concurrency``, or ``rate_per_s`` for an
    open-loop rate sweep (whose ``max_concurrency`` is then the largest passing offered rate)."""
    lo, hi = bracket(outcomes)
    rate = load == "rate_per_s"
    return {
        "load": load,
        "objectives": objectives.thresholds,
        **({"limits": dict(objectives.limits), "preset": objectives.preset} if objectives.limits else {}),
        "attainment_target": objectives.attainment,
        "max_concurrency": lo,
        "bracket": [lo, hi],
        "search": {
            "enabled": objectives.search,
            "stages": list(search_concurrencies),
            "resolution": objectives.resolution,
            "converged": converged(lo, hi, objectives.resolution, rate),
        },
    }
