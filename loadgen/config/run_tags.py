"""The run's own tags: ``--label`` and ``--metadata KEY=VALUE``, as vLLM's benchmark has them.

They describe the run, not the load, so they are not scenario keys: the label joins the run name
(``<run name>_<label>``, hence the run folder, report.html's title and compare's run names) and
both land in summary.json as ``run.label`` and ``run.metadata`` (a mapping of text to text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from loadgen.errors import ConfigError

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class RunTags:
    label: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def run_name(self, name: str) -> str:
        """The run name with the label appended: ``default_completions-200-200_c1-1024_fp8-kv``."""
        return f"{name}_{self.label}" if self.label else name

    def into_summary(self, summary: dict) -> dict:
        """summary.json with ``run.label`` and ``run.metadata`` set (in place; returned)."""
        summary["run"]["label"] = self.label
        summary["run"]["metadata"] = dict(self.metadata)
        return summary


def tags_from_options(parsed_options: Any) -> RunTags:
    """RunTags of ``--label`` and ``--metadata`` (each ``--metadata`` takes one or more KEY=VALUE,
    and may be repeated). ConfigError naming the bad value and the fix."""
    label = getattr(parsed_options, "label", None)
    if label is not None and not _LABEL.fullmatch(str(label)):
        raise ConfigError("--label", label, "must be 1-64 letters, digits, '.', '_' or '-' (it names the "
                          "run folder), starting with a letter or digit", "e.g. --label fp8-kv")
    metadata: dict[str, str] = {}
    for group in getattr(parsed_options, "metadata", None) or []:
        for item in [group] if isinstance(group, str) else group:
            key, eq, value = str(item).partition("=")
            if not eq or not _KEY.fullmatch(key):
                raise ConfigError("--metadata", item, "must be KEY=VALUE with KEY of letters, digits, "
                                  "'_', '.' or '-'", "e.g. --metadata tp=8 --metadata image=v0.9")
            if key in metadata and metadata[key] != value:
                raise ConfigError("--metadata", item, f"gives {key} a second value ({metadata[key]!r} before)",
                                  f"pass {key}= once")
            metadata[key] = value
    return RunTags(label, metadata)


def tags_text(summary: dict) -> str:
    """`` (label fp8-kv; tp=8, image=v0.9)`` for a summary with tags, else "" (compare's run lines)."""
    run = summary.get("run") or {}
    parts = [f"label {run['label']}"] if run.get("label") else []
    if run.get("metadata"):
        parts.append(", ".join(f"{k}={v}" for k, v in run["metadata"].items()))
    return f" ({'; '.join(parts)})" if parts else ""
