"""Files the package carries for the user: the bundled scenarios and the Grafana kit.

In a clone ``loadgen/scenarios``, ``loadgen/grafana`` and ``loadgen/docs`` are symbolic links to
``config/``, ``grafana/`` and ``docs/``; the wheel carries their files inside the package (pyproject.toml package-data). So
the same paths work in both, and the clone keeps one copy of each file.

``--scenario smoke`` names a bundled scenario; ``--scenario path/to/file.yaml`` a file. A path that exists
wins over a bundled scenario of the same name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # loadgen/ (this module is loadgen/config/bundled.py)
SCENARIOS_DIR = PACKAGE_DIR / "scenarios"
GRAFANA_DIR = PACKAGE_DIR / "grafana"
DOCS_DIR = PACKAGE_DIR / "docs"  # docs/ of the repository (a link in the clone)

# What the grafana subcommand writes: the dashboard, Prometheus' scrape config, Grafana's
# provisioning and the compose file that ties them together (paths relative to GRAFANA_DIR).
GRAFANA_FILES = (
    "README.md",
    "prometheus.yml",
    "docker-compose.yml",
    "dashboards/llm-loadgen.json",
    "provisioning/dashboards/provider.yml",
    "provisioning/datasources/prometheus.yml",
)

# a sentence ends at ". " before a capital; "... 1024" (an ellipsis before a number) does not end one
_SENTENCE_END = re.compile(r"(?<=[^.][.!?])\s+(?=[A-Z`(])")


def scenario_names() -> list[str]:
    """The bundled scenarios' names (file stems), sorted."""
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml")) if SCENARIOS_DIR.is_dir() else []


def scenario_path(name: str) -> Path | None:
    """The bundled scenario file called ``name`` (``smoke`` or ``smoke.yaml``), or None."""
    stem = name[:-5] if name.endswith(".yaml") else name
    if not stem or "/" in stem or os.sep in stem:
        return None
    path = SCENARIOS_DIR / f"{stem}.yaml"
    return path if path.is_file() else None


def resolve_scenario(arg: str | os.PathLike[str]) -> Path:
    """``--scenario``'s value as a file: an existing path as given, else the bundled scenario of that name,
    else the path as given (reading it then fails with the list of bundled scenarios)."""
    path = Path(arg)
    if path.exists():
        return path
    return scenario_path(str(arg)) or path


def scenario_summary(name: str) -> str:
    """The first sentence of the bundled scenario's leading comment block (its one-line description)."""
    path = scenario_path(name)
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines() if path else []:
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(x for x in lines if x)
    return _SENTENCE_END.split(text, maxsplit=1)[0] if text else "(no description)"
