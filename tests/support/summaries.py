"""Recorded run summaries (tests/fixtures/summary_*.json) for the report and results tests."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def recorded_summary(name: str) -> dict:
    """``tests/fixtures/summary_NAME.json``, parsed afresh (a test may change it)."""
    return json.loads((FIXTURES / f"summary_{name}.json").read_text())
