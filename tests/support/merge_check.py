"""The exact-merge check of a distributed run: the master's totals, less its own start-check probes,
equal the sum of the ledgers its workers wrote (``results/workers/<id>.json``), count for count.

Shared by every test of a run with workers (tests/integration/test_distributed.py, tests/integration/test_wheel.py,
tests/integration/test_multihost.py through tests/support/netcluster.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.stats.stage_stats import HISTOGRAMS, StageStats

MERGED = ("requests", "input_tokens", "output_tokens", "received_output_tokens")


def worker_ledgers(results: Path) -> list[StageStats]:
    """Each worker's own record of what it shipped (the results folder's workers/*.json), by file name."""
    return [StageStats.from_message(json.loads(p.read_text())["totals"])
            for p in sorted((results / "workers").glob("*.json"))]


def merged(parts) -> StageStats:
    total = StageStats()
    for p in parts:
        total.merge(p)
    return total


def from_workers(summary: dict) -> dict:
    """The master's totals less its own start-check probe requests (``preflight``, counted in the
    totals but sent by no worker): what the workers' reports added up to."""
    t, pre = summary["totals"], summary.get("preflight") or {}
    out = {k: t[k] - pre.get(k, 0) for k in MERGED}
    out["errors"] = {k: n - pre.get("errors", {}).get(k, 0) for k, n in t["errors"].items()}
    out["errors"] = {k: n for k, n in out["errors"].items() if n}
    out["histogram_counts"] = {h: n - pre.get("histogram_counts", {}).get(h, 0) for h, n in t["histogram_counts"].items()}
    return out


def ledger_totals(total: StageStats) -> dict:
    """The same figures from the sum of the worker ledgers."""
    return {"requests": total.requests_ok, "input_tokens": total.input_tokens, "output_tokens": total.output_tokens,
            "received_output_tokens": total.window_output_tokens, "errors": dict(total.errors),
            "histogram_counts": {h: getattr(total, h).count for h in HISTOGRAMS}}


def assert_exact_merge(summary: dict, total: StageStats) -> None:
    """The master's totals (less its own probes) are the sum of the workers' ledgers, count for count."""
    master, ledgers = from_workers(summary), ledger_totals(total)
    assert master == ledgers, f"master totals (less preflight) {master} != sum of the worker ledgers {ledgers}"
