"""The SLO summary (summary.json's ``slo``, ``loadgen.slo.search.slo_summary``) as one console line."""

from __future__ import annotations

from loadgen.stats.stage_load import load_label, load_number


def slo_line(slo: dict) -> str:
    """One line for the console: the SLO maximum said plainly, including 'none passed', with the
    objectives and the search stages (an open-loop summary is in requests/s)."""
    rate = slo.get("load") == "rate_per_s"
    what = "rate" if rate else "concurrency"
    lo, hi = ((None if x is None else load_label(x, rate)) for x in slo["bracket"])
    target = f"{slo['attainment_target']:.0%}"
    goal = ", ".join(f"{k} <= {v:g}" for k, v in slo["objectives"].items()) or "the objectives"
    limits = ", ".join(f"{k} <= {v:g}" for k, v in (slo.get("limits") or {}).items())
    if limits:  # percentile limits of the stage, beside (or instead of) per-request objectives
        goal = f"{limits}, {goal} for {target} of requests" if slo["objectives"] else \
            f"{limits}, {target} of requests ok"
    search = slo["search"]
    stages = ", ".join(map(load_number, search["stages"]))
    tail = (f"; search stages {stages} req/s" if rate else f"; search stages C={stages}") if stages else ""
    if search["enabled"] and lo is not None and hi is not None and not search["converged"]:
        tail += " (search stopped at slo.max_search_stages before the resolution)"
    if lo is None:
        return (f"SLO: no stage met {goal}{'' if limits else f' for {target} of requests'} "
                f"(max {what}: none; {hi} already failed{tail})")
    if hi is None:
        return f"SLO: max {what} {lo} (every stage passed {goal}: the limit is above {lo}{tail})"
    if limits:
        return f"SLO: max {what} {lo} ({goal} held; {hi} did not{tail})"
    return f"SLO: max {what} {lo} ({target} of requests met {goal}; {hi} did not{tail})"
