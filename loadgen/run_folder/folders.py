"""Run folders: every run writes into a folder of its own under the results directory.

    <results-dir>/<UTC start, YYYYmmdd-HHMMSS>_<run name>/   summary.json, stages.csv, report.html, PNGs
    <results-dir>/latest -> the newest run that measured a stage   (a relative symbolic link)
    <results-dir>/<...>/FAILED                           a run that measured no stage: its first line says why

Nothing of an earlier run is ever replaced: a second run in the same second gets ``-2``, ``-3``.
``latest`` moves to a run once its first stage is measured (``settle_run``), so a failed start
(a closed port, a refused key) keeps its folder, marked ``FAILED``, and ``latest`` still names
the last good run.
``report build`` and ``compare`` accept a run folder or the results directory (its newest run:
``latest`` when it points at a run, else the last run folder by name, which sorts by start time).

The run name is the effective scenario after every override: ``<scenario name>_<endpoint>-<input
tokens>-<output tokens>_c<first C>-<last C>``, e.g. ``default_completions-200-200_c1-1024`` (open loop:
``_r<first rate>-<last rate>``, requests/s).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

LATEST = "latest"
SUMMARY = "summary.json"
FAILED = "FAILED"  # the marker file of a run that measured no stage
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_name(scenario) -> str:
    """The effective scenario in a few characters (module docstring); from a Scenario. An
    open-loop run names its first and last offered rate instead: ``_r0.5-8`` (requests/s)."""
    head = f"{scenario.name}_{scenario.endpoint}-{scenario.input_tokens}-{scenario.output_tokens}"
    rates = scenario.rate.rates() if getattr(scenario, "open_loop", False) else None
    if rates:
        return f"{head}_r{rates[0]:g}-{rates[-1]:g}"
    cs = scenario.concurrencies()
    return f"{head}_c{cs[0]}-{cs[-1]}"


def folder_name(started_wall: float, name: str) -> str:
    """``YYYYmmdd-HHMMSS_<name>`` (UTC), the name reduced to letters, digits, ``._-``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started_wall))
    return f"{stamp}_{_UNSAFE.sub('-', name).strip('-') or 'run'}"


def create_run_dir(parent: str | os.PathLike, started_wall: float, name: str) -> Path:
    """Create the run's own folder under ``parent`` (never an existing one); ``latest`` is left
    to ``settle_run``. Returns the folder."""
    root = Path(parent)
    root.mkdir(parents=True, exist_ok=True)
    base = folder_name(started_wall, name)
    for n in range(1, 1000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{root / base}: 999 runs started in the same second with this name")


def point_latest(root: Path, folder: str) -> None:
    """``root/latest`` -> ``folder`` (relative), replaced atomically; a file system without
    symbolic links keeps no ``latest`` (resolution then takes the newest folder by name)."""
    tmp = root / f".{LATEST}.{os.getpid()}.tmp"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(folder, target_is_directory=True)
        os.replace(tmp, root / LATEST)
    except OSError:
        tmp.unlink(missing_ok=True)


def settle_run(run_dir: Path, measured: bool, reason: str | None) -> None:
    """Where a run stands, each time its results are written: a run that measured a stage is
    ``latest`` (and loses any ``FAILED`` marker); one that ended (``reason``: its stop reason)
    without a measured stage gets the ``FAILED`` marker, and ``latest`` stays where it was."""
    marker = run_dir / FAILED
    if measured:
        marker.unlink(missing_ok=True)
        point_latest(run_dir.parent, run_dir.name)
    elif reason is not None:
        marker.write_text(f"{reason}: this run measured no stage; summary.json says why "
                          "(run.stop_reason, the console's last lines)\n", encoding="utf-8")


def run_folders(root: Path) -> list[Path]:
    """The run folders under ``root`` (those holding a summary.json), oldest first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.name != LATEST and not p.name.startswith(".")
                   and (p / SUMMARY).is_file()), key=lambda p: p.name)


def resolve_run_dir(path: str | os.PathLike) -> Path:
    """The newest run of a results directory (its ``latest``, else its newest run folder), or a
    run folder as given; the path unchanged when it is neither (the caller's check names it).
    A results directory that also holds a summary.json of its own (written there by a version
    before run folders) still means its newest run, not that stale file."""
    path = Path(path)
    latest = path / LATEST
    if (latest / SUMMARY).is_file():
        return latest.resolve()
    runs = run_folders(path)
    if runs:
        return runs[-1]
    return path
