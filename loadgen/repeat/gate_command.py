"""``report compare BASELINE CANDIDATE --fail-on RULES`` on two repeat folders: the gate's files and exit code.

A repeat folder is what ``llm-loadgen --repeat N`` writes (``loadgen.repeat.runner``): its repeat.json
keeps every repetition's figures, so the gate (``loadgen.repeat.gate``, pure) needs nothing else.
Written to ``--out``: gate.txt (what is printed) and gate.json (every metric's assessment). Exit codes: 0 no
rule failed (``not distinguishable`` and ``better`` never fail); ``EXIT_REGRESSION`` (6) a rule
failed; 2 (``EXIT_CONFIG``) a folder without repeat.json, a bad rule, a rate sweep against a
concurrency sweep.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from loadgen.errors import EXIT_OK, EXIT_REGRESSION, ConfigError
from loadgen.repeat.gate import format_gate, gate, parse_fail_on, regressions
from loadgen.repeat.summary import REPEAT_FILE, REPEAT_SCHEMA, upgraded
from loadgen.report.compare import TEXT_METRICS
from loadgen.run_folder.atomic import atomic_write_text

SHOWN = tuple(m.key for m in TEXT_METRICS)


def is_repeat_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / REPEAT_FILE).is_file()


def load_repeat(path: str | os.PathLike) -> dict:
    """A repeat folder's repeat.json; ConfigError naming the path and the fix."""
    file = Path(path) / REPEAT_FILE
    fix = "pass the folders llm-loadgen --repeat N wrote (<results-dir>/<start>_repeatN)"
    if not file.is_file():
        raise ConfigError("compare --fail-on", str(path), f"has no {REPEAT_FILE}: the gate compares repeated runs", fix)
    try:
        repeat = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError("compare", str(file), f"is not readable JSON ({exc})", fix) from None
    if isinstance(repeat, dict):
        repeat = upgraded(repeat)
    if not isinstance(repeat, dict) or repeat.get("schema") != REPEAT_SCHEMA:
        raise ConfigError("compare", str(file), f"is not a {REPEAT_SCHEMA} file", fix)
    return repeat


def run_gate(dirs: list[Path], out: Path, fail_on: str | None, emit=print) -> int:
    """The gate of ``dirs`` = [baseline, candidate]; returns the exit code (module docstring)."""
    if len(dirs) != 2:
        raise ConfigError("compare", [str(d) for d in dirs], "the gate compares exactly two repeat folders",
                          "pass BASELINE CANDIDATE")
    rules = parse_fail_on(fail_on) if fail_on else ()
    base, cand = (load_repeat(d) for d in dirs)
    changes = gate(base, cand, rules)
    head = (f"baseline  {dirs[0]} ({len(base['repetitions'])} repetitions)\n"
            f"candidate {dirs[1]} ({len(cand['repetitions'])} repetitions)")
    text = head + "\n" + format_gate(changes, rules, base["load"], SHOWN)
    emit(text)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "gate.txt", text + "\n")
    failed = regressions(changes)
    atomic_write_text(out / "gate.json", json.dumps({
        "baseline": str(dirs[0]), "candidate": str(dirs[1]), "load": base["load"],
        "rules": [{"key": r.key, "threshold": r.threshold} for r in rules],
        "regression": bool(failed), "metrics": [v.to_dict() for v in changes]}, indent=2) + "\n")
    emit(f"wrote {out / 'gate.txt'}\nwrote {out / 'gate.json'}")
    return EXIT_REGRESSION if failed else EXIT_OK
