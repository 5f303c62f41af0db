"""slices.csv: one line per closed time slice, appended as each closes, and read back.

A run appends each slice's row (``loadgen.stats.slices.slice_row``) the moment it closes, one
``write`` of whole lines then a flush, so a run killed with SIGKILL keeps every slice closed
before the kill (at worst the line being written is cut: ``read_slice_rows`` skips a line whose
fields do not parse). Columns: ``loadgen.stats.slices.SLICE_COLUMNS``; empty = None, ``errors`` as
``kind=n;kind=n``, booleans ``true``/``false``.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from loadgen.stats.slices import SLICE_COLUMNS

SLICES_CSV = "slices.csv"
_INTS = frozenset(("stage", "slice", "requests", "error_count"))
_BOOLS = frozenset(("partial", "few_samples"))


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ";".join(f"{k}={n}" for k, n in value.items())
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def slice_lines(rows: list[dict], header: bool) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    if header:
        w.writerow(SLICE_COLUMNS)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in SLICE_COLUMNS])
    return out.getvalue()


def append_slice_rows(path: str | os.PathLike, rows: list[dict]) -> None:
    """Append ``rows`` to slices.csv (the header first when the file is new or empty)."""
    path = Path(path)
    header = not path.exists() or path.stat().st_size == 0
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(slice_lines(rows, header))
        f.flush()


def _value(column: str, text: str):
    if text == "":
        return None
    if column in _BOOLS:
        return text == "true"
    if column in _INTS:
        return int(text)
    if column == "errors":
        return {k: int(n) for k, n in (part.split("=", 1) for part in text.split(";"))}
    return float(text)


def read_slice_rows(path: str | os.PathLike) -> list[dict]:
    """The rows of a slices.csv ([] when there is none); a cut or unreadable line is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        for line in csv.DictReader(f):
            try:
                rows.append({c: _value(c, line[c]) for c in SLICE_COLUMNS})
            except (KeyError, TypeError, ValueError):
                continue
    return rows


def with_csv_slices(run_dir: str | os.PathLike, summary: dict) -> dict:
    """``summary`` with the slices of ``run_dir``'s slices.csv when it holds more of them than
    summary.json (rewritten less often than slices close: a killed run's last slices)."""
    rows = read_slice_rows(Path(run_dir) / SLICES_CSV)
    return {**summary, "slices": rows} if len(rows) > len(summary.get("slices") or []) else summary
