"""The suite's layout is its marking: a test under ``tests/integration/`` starts real processes and
is marked ``integration`` here; ``tests/unit/<package>/`` mirrors ``loadgen/<package>``;
``tests/support/`` holds the tools the tests share (servers, ports, runs, builders)."""

from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
