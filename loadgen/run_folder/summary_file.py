"""summary.json, the run folder's record of a run: written as strict JSON, read back checked.

Written by ``loadgen.run.results`` (through ``loadgen.report.files.write_results``, atomically),
read by ``report build``/``compare``, the repeats and the what-if's calibration.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from loadgen.errors import ConfigError

SUMMARY = "summary.json"
SCHEMA = 1  # summary.json's schema: written by loadgen.run.results, checked here on read


def _json_safe(value):
    """NaN and infinities become null: strict JSON readers reject them, and a summary that cannot
    be read back is worse than one with a missing number."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def summary_json_text(summary: dict) -> str:
    return json.dumps(_json_safe(summary), indent=2, allow_nan=False, default=str) + "\n"


def load_summary(results_dir: str | os.PathLike) -> dict:
    """Read and check ``<results_dir>/summary.json``; raise ConfigError naming the path and the fix."""
    path = Path(results_dir)
    if not path.is_dir():
        raise ConfigError(
            "run folder",
            str(path),
            "not found or not a directory",
            "pass a directory written by a run, the one holding summary.json",
        )
    file = path / SUMMARY
    if not file.is_file():
        raise ConfigError(
            "summary.json",
            str(file),
            "missing",
            "pass the run folder of a run that completed at least its start",
        )
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            "summary.json",
            str(file),
            f"unreadable or invalid JSON ({exc})",
            "restore the file or re-run; summary.json is written atomically by a run",
        ) from None
    if (
        not isinstance(summary, dict)
        or not isinstance(summary.get("stages"), list)
        or not all(isinstance(stage, dict) for stage in summary["stages"])
    ):
        raise ConfigError(
            "summary.json",
            str(file),
            "has no 'stages' list of objects",
            "pass a summary.json written by llm-loadgen",
        )
    summary = upgraded(summary)
    if summary.get("schema") != SCHEMA:
        raise ConfigError(
            "summary.json",
            str(file),
            f"has schema {summary.get('schema')!r}, expected {SCHEMA}",
            "rebuild it with the llm-loadgen version that wrote it",
        )
    return summary


# Keys an older version wrote under another name: (the stage row's block, old key, new key). Read
# back under the new name, so report build and compare work on run folders of either version.
RENAMED_STAGE_KEYS = (("breakdown", "verdict", "diagnosis"),)


def upgraded(summary: dict) -> dict:
    """``summary`` with the keys of ``RENAMED_STAGE_KEYS`` under their current names (a new dict;
    a stage that has the new key keeps it)."""
    stages = []
    for stage in summary["stages"]:
        stage = dict(stage)
        for block, old, new in RENAMED_STAGE_KEYS:
            part = stage.get(block)
            if isinstance(part, dict) and old in part and new not in part:
                stage[block] = {(new if k == old else k): v for k, v in part.items()}
        stages.append(stage)
    return {**summary, "stages": stages}
