"""The recorded DCGM exporter output (tests/fixtures/dcgm/metrics.txt: two scrapes of 8 GPUs, at a
window's open and close) as the GPU-telemetry tests read it."""

from __future__ import annotations

from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "metrics.txt"
SPLIT = "# ---- scrape at the window's close"


def dcgm_scrapes() -> tuple[str, str]:
    """The fixture's two scrapes: (at the window's open, at its close)."""
    opened, _, closed = FIXTURE.read_text().partition(SPLIT)
    return opened, closed.partition("\n")[2]


def dcgm_values(text: str, name: str) -> list[float]:
    """The values of ``name``'s lines, read from the text directly (not through the parser)."""
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
