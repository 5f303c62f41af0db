"""The per-stage text table (printed live as each stage ends, and at the end) and stages.csv.

Pure formatting: stage dicts in summary.json form in, text out. Units are chosen for people:
tokens/s, milliseconds for TTFT/ITL/TPOT, seconds for E2E.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from pathlib import Path

from loadgen.analysis.knee import rate_knee_text
from loadgen.errors import FAILURE_KINDS, short_kind
from loadgen.report.slo_line import slo_line
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.stats.flags import flags_in, legend_lines
from loadgen.stats.metrics import STAGE_METRICS, num
from loadgen.stats.stage_load import RATE, load_column, load_key, load_label, load_number, stage_load


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else num(seconds * 1000.0)


def secs(seconds: float | None) -> str:
    return num(seconds)


def errors_compact(stage: dict) -> str:
    """Total errors then the kinds, most frequent first: ``"5 429:3 reset:2"``; ``"0"`` if none."""
    errors = {k: n for k, n in (stage.get("errors") or {}).items() if n}
    total = stage.get("error_count")
    if total is None:
        total = sum(errors.values())
    if not errors:
        return str(total)
    kinds = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{total} " + " ".join(f"{short_kind(k)}:{n}" for k, n in kinds)


def mismatch_compact(stage: dict) -> str:
    """Requests whose token counts differ from what was asked: ``"in:2 out:5 est:1"``; "0" if none.

    ``est`` counts requests without server usage whose tokens were estimated from chunks.
    """
    tm = stage.get("token_mismatch")
    if not tm:
        return "-"
    parts = [
        f"{short}:{tm[key]}"
        for key, short in (("input", "in"), ("output", "out"), ("estimated", "est"))
        if tm.get(key)
    ]
    return " ".join(parts) if parts else "0"


def stage_flags(stage: dict, knee: float | None = None) -> list[str]:
    """The stage's own flags (set by the run: guard, over capacity, client-bound...) plus ``knee``
    (a concurrency, or an offered rate: the stage's ``stage_load``)."""
    flags = list(stage.get("flags") or [])
    if knee is not None and stage_load(stage) == knee and "knee" not in flags:
        flags.append("knee")
    return flags


def flags_shown(stage: dict, knee: float | None = None) -> list[str]:
    """``stage_flags`` as the tables show them: ``slo_fail`` names the percentile limits that
    failed, ``slo_fail(tpot_p90_s)`` (``slo.failed``, loadgen.slo.limits)."""
    limits = [k for k in (stage.get("slo") or {}).get("failed") or [] if k != "attainment"]
    return [f"{f}({','.join(limits)})" if f == "slo_fail" and limits else f for f in stage_flags(stage, knee)]


# (header line 1, header line 2 (unit), width, cell) — one list drives the header and the rows:
# the stage and its request count, then every metric of loadgen.stats.metrics that has a console column.
Column = tuple[str, str, int, Callable[[dict], str]]


def load_cell(stage: dict) -> str:
    """The stage's load, under the load column's title (``C``, or ``rate`` in req/s): ``8``."""
    return load_number(stage_load(stage))


COLUMNS: list[Column] = [
    (*load_column(rate=False), 6, load_cell),
    ("reqs", "", 6, lambda s: str(s.get("requests", "-"))),
] + [
    (m.console.title, m.console.subtitle or m.shown.unit, m.console.width, m.cell)
    for m in STAGE_METRICS
    if m.console is not None
]
TAIL_COLUMNS = ("errors", "tok mismatch", "flags")  # variable width, left-aligned
_SLO_TITLES = {m.console.title for m in STAGE_METRICS if m.console is not None and m.console.slo}


def columns(slo: bool) -> list[Column]:
    """``COLUMNS``, without the SLO ones unless the run sets objectives (a stage row has ``slo``)."""
    return [c for c in COLUMNS if slo or c[0] not in _SLO_TITLES]


def format_stage_header(open_loop: bool = False, slo: bool = False) -> str:
    """Two header lines (names, units) matching :func:`format_stage_row` (open loop: the first
    column is the offered rate, ``load_column``; ``slo``: with the SLO columns)."""
    cols = columns(slo)
    cols[0] = (*load_column(open_loop), *cols[0][2:])
    names = "".join(f"{name:>{width}}" for name, _, width, _ in cols)
    units = "".join(f"{unit:>{width}}" for _, unit, width, _ in cols)
    tail = f"  {TAIL_COLUMNS[0]:<24}{TAIL_COLUMNS[1]:<14}{TAIL_COLUMNS[2]}"
    return names + tail + "\n" + units


def format_stage_row(stage: dict, knee: float | None = None) -> str:
    """One stage as a fixed-width line, for printing live when the stage ends."""
    cells = "".join(f"{cell(stage):>{width}}" for _, _, width, cell in columns("slo" in stage))
    flags = ",".join(flags_shown(stage, knee)) or "-"
    return f"{cells}  {errors_compact(stage):<23} {mismatch_compact(stage):<13} {flags}"


def format_notes(
    stages: list[dict], knee: float | None = None, guard: dict | None = None, threshold: float = 0.1,
    slo: dict | None = None, open_loop: bool | None = None,
) -> list[str]:
    """Lines under the table: the knee, the SLO maximum (summary.json ``slo``) and the KV ceiling
    together, then where the guard stopped the sweep (its loads in the sweep's unit: a
    concurrency, or an offered rate). An open-loop knee is said with its evidence
    (``rate_knee_text``: the stage beyond it, and why the server did not sustain it).
    ``open_loop``: the run's mode (None: read from the stages; a guard may stop before any)."""
    notes = []
    rate = load_key(stages) == RATE if open_loop is None else open_loop
    if rate:
        if len(stages) >= 2 and (text := rate_knee_text(stages, threshold)) is not None:
            notes.append(f"knee: {text}")
    elif knee is not None:
        notes.append(
            f"knee: C={knee} (beyond it, output tok/s gains <{threshold:.0%} per doubling of concurrency)"
        )
    elif len(stages) >= 2:
        notes.append("knee: none found (throughput still rising at the last stage)")
    if slo is not None:
        notes.append(slo_line(slo))
    guard = guard or {}
    if guard.get("max_concurrency") is not None:
        notes.append(kv_ceiling_line(guard["max_concurrency"], rate, guard.get("capacity_tokens")))
    if guard.get("stopped_before") is not None:
        cap = guard.get("capacity_tokens")
        cap_text = f"{cap:,} tokens ({guard.get('capacity_source') or 'unknown source'})" if cap else "?"
        notes.append(f"guard: stopped before {load_label(guard['stopped_before'], rate)}: projected KV use "
                     f"exceeds capacity {cap_text}")
    if guard.get("clamped_to") is not None:
        notes.append(f"guard: last stage clamped to {load_label(guard['clamped_to'], rate)}")
    return notes


def kv_ceiling_line(ceiling: int, rate: bool, capacity_tokens: int | None = None) -> str:
    """The KV ceiling (summary.json ``guard.max_concurrency``): the most requests in flight whose
    projected KV use fits, ``C=1,570`` in a concurrency sweep; in a rate sweep said as requests in
    flight, which by Little's law bound offered rate x E2E mean."""
    fits = f"fits {capacity_tokens:,} tokens" if capacity_tokens else "fits"
    if rate:
        return (f"KV ceiling: {ceiling:,} requests in flight (the most whose projected KV use {fits}; "
                "offered rate x E2E mean must stay below it)")
    return f"KV ceiling: C={ceiling:,} (the largest concurrency whose projected KV use {fits})"


def format_stage_table(
    stages: list[dict], knee: float | None = None, guard: dict | None = None, threshold: float = 0.1,
    slo: dict | None = None, open_loop: bool | None = None,
) -> str:
    """The whole table: header, one row per stage, then notes on the knee, the SLO maximum, the KV
    ceiling and the guard stop (``guard`` and ``slo`` are summary.json's; ``threshold`` the knee's),
    then one legend line for each flag the table shows (``loadgen.stats.flags``)."""
    rate = load_key(stages) == RATE if open_loop is None else open_loop
    lines = [format_stage_header(rate, slo=any("slo" in s for s in stages))]
    lines += [format_stage_row(s, knee) for s in stages]
    lines += format_notes(stages, knee, guard, threshold, slo, rate)
    lines += legend_lines(flags_in({"flags": stage_flags(s, knee)} for s in stages))
    return "\n".join(lines)


# --- stages.csv -----------------------------------------------------------------------------------

NESTED = ("errors", "token_mismatch", "server", "gpu", "client", "slo", "breakdown")
# The summary.json stage fields in contract order; these columns are always present, in this order.
BASE_COLUMNS = [
    "index",
    "concurrency",
    "window_s",
    "requests",
    "error_count",
    "input_tokens",
    "output_tokens",
    *(m.key for m in STAGE_METRICS),
    "token_mismatch.input",
    "token_mismatch.output",
    "token_mismatch.estimated",
    "flags",
    *(f"errors.{kind}" for kind in FAILURE_KINDS),
    "client.cpu_percent",
    "client.loop_lag_p99_s",
]


def flatten_stage(stage: dict) -> dict:
    """One CSV row: nested dicts become dotted columns (``errors.read_timeout``,
    ``token_mismatch.output``, ``server.kv_usage_max``), ``flags`` is ``;``-joined; a mix's
    ``models`` and several replicas' ``replicas`` have a CSV of their own (``loadgen.report.models``,
    ``loadgen.report.replicas``)."""
    row: dict = {}
    for key, value in stage.items():
        if key in ("models", "replicas"):
            continue
        if key in NESTED and isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, dict):  # slo.attainment_by.ttft_s, slo.limits.ttft_p99_s.pass
                    row.update({f"{key}.{sub}.{k}.{kk}" if isinstance(x, dict) else f"{key}.{sub}.{k}": xx
                                for k, x in v.items()
                                for kk, xx in (x.items() if isinstance(x, dict) else [(None, x)])})
                elif isinstance(v, list):  # slo.failed
                    row[f"{key}.{sub}"] = ";".join(map(str, v))
                else:
                    row[f"{key}.{sub}"] = v
        elif key == "flags":
            row[key] = ";".join(value or [])
        elif isinstance(value, dict | list):
            row[key] = repr(value)
        else:
            row[key] = value
    for kind in FAILURE_KINDS:  # zero, not blank: every kind is counted in every stage
        row.setdefault(f"errors.{kind}", 0)
    return row


def stages_csv_text(stages: list[dict]) -> str:
    rows = [flatten_stage(s) for s in stages]
    columns = list(BASE_COLUMNS)  # fixed leading columns so CSVs of different runs line up
    for row in rows:
        columns += [k for k in row if k not in columns]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def write_stages_csv(path: str | os.PathLike, stages: list[dict]) -> Path:
    """Write stages.csv atomically (temp file + rename)."""
    return atomic_write_text(Path(path), stages_csv_text(stages))
