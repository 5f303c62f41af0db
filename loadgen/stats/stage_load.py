"""A stage's load, and how every view names it: a concurrency (closed loop, ``C=8``) or an offered
request rate (open loop, ``8 req/s``).

Pure: no imports, no I/O. A summary.json stage row holds its load under one of two keys:
``concurrency`` (users, each with one request in flight), or in open-loop mode
``offered_rate_per_s`` with ``concurrency`` None. The console, the stage table, report.html, the
plots, the web UI, compare and the SLO answer read a stage's load with ``stage_load`` and name it
with ``load_label`` (prose) or ``load_number`` under ``load_column`` (a table), so a rate stage is
never called ``C=``.
"""

from __future__ import annotations

CONCURRENCY = "concurrency"
RATE = "offered_rate_per_s"
RATE_UNIT = "req/s"


def is_rate_stage(stage: dict) -> bool:
    """The stage's load was a request rate (an open-loop row: no concurrency, an offered rate)."""
    return stage.get(CONCURRENCY) is None and stage.get(RATE) is not None


def load_key(stages: list[dict]) -> str:
    """The load key of a sweep's rows: ``offered_rate_per_s`` when any is a rate stage, else
    ``concurrency``."""
    return RATE if any(is_rate_stage(s) for s in stages) else CONCURRENCY


def is_rate_run(summary: dict) -> bool:
    """summary.json (or the web UI's view of it) of an open-loop run: a rate stage, or a knee
    recorded as a rate (``knee.rate_per_s``, present in every open-loop summary, stages or not)."""
    return "rate_per_s" in (summary.get("knee") or {}) or load_key(summary.get("stages") or []) == RATE


def stage_load(stage: dict) -> float | None:
    """The stage's load: its offered rate (requests/s) for a rate stage, else its concurrency."""
    return stage.get(RATE) if is_rate_stage(stage) else stage.get(CONCURRENCY)


def planned_load(stage: dict) -> float | None:
    """The load the stage was asked to run: for a rate stage whose offered rate was lowered by a
    lost worker, ``planned_rate_per_s`` (so stages of two runs at the same asked rate match)."""
    if is_rate_stage(stage) and stage.get("planned_rate_per_s") is not None:
        return stage["planned_rate_per_s"]
    return stage_load(stage)


def load_number(value: float | None) -> str:
    """A load as a bare number: ``8``, ``0.5``, ``7.48`` (3 significant digits, as the guard rounds
    a clamped rate; whole above 100); "-" for None."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def load_label(value: float | None, rate: bool) -> str:
    """A load in prose: ``C=8`` (a concurrency) or ``8 req/s`` (``rate``: an offered rate);
    ``none`` for None."""
    if value is None:
        return "none"
    return f"{load_number(value)} {RATE_UNIT}" if rate else f"C={load_number(value)}"


def stage_label(stage: dict) -> str:
    """``load_label`` of a stage row: ``C=8`` or ``8 req/s``."""
    return load_label(stage_load(stage), is_rate_stage(stage))


def load_column(rate: bool) -> tuple[str, str]:
    """(title, unit) of a table's load column: ``("C", "")``, or ``("rate", "req/s")``."""
    return ("rate", RATE_UNIT) if rate else ("C", "")
