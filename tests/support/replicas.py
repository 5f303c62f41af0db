"""Three simulator replicas for the replicas tests (tests/integration/test_replicas_*.py): one fast,
one slower to decode, one with a smaller KV cache, and the checks both layouts share.

Every request: 80 input + 40 output tokens = 120 KV tokens (guard margin 0). Capacities 2,400,
2,400 and 1,200 tokens: 20, 20 and 10 requests each; the fleet's sum 6,000 holds 50 (what a
router's guard projects against); spread evenly by the client, the small replica binds first at
3 x 10 = 30 (``kv_guard.decide_spread``). The slow replica decodes at 20 ms a token against the
others' 5 ms: its TPOT p50 is about 4 x theirs, far above the slow flag's 2 x.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import pytest

from loadgen.sim.launch import running_sim
from loadgen.stats.stage_stats import StageStats

REPLICAS = (("fast", "5", "2400"), ("slow", "20", "2400"), ("small", "5", "1200"))  # (role, itl_ms, kv_tokens)
CAPACITY = {"fast": 2400, "slow": 2400, "small": 1200}
LOAD = ("--scenario", "config/smoke.yaml", "--input-tokens", "80", "--output-tokens", "40", "--warmup", "1",
        "--stage-duration", "2")
SUMMED = ("requests", "error_count", "input_tokens", "output_tokens")


@contextmanager
def three_replicas():
    """{role: its SimProcess}, each with TTFT 20 ms."""
    with ExitStack() as stack:
        yield {role: stack.enter_context(running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", itl,
                                                     "--kv-tokens", kv))
               for role, itl, kv in REPLICAS}


def name_of(sim) -> str:
    """A replica's name as the run gives it: host:port."""
    return sim.url.split("//", 1)[1].rstrip("/")


def assert_rows_sum_to_stage(stage: dict) -> None:
    """Per-replica rows add up to the stage exactly (tok/s up to float rounding)."""
    rows = stage["replicas"]
    for key in SUMMED:
        assert sum(r[key] for r in rows.values()) == stage[key], (stage["index"], key)
    assert sum(r["output_tokens_per_s"] for r in rows.values()) == pytest.approx(stage["output_tokens_per_s"],
                                                                                rel=1e-9)


def assert_slow_flagged(stage: dict, sims: dict) -> None:
    """The slow replica, and only it, is flagged slow; the stage says so."""
    rows = stage["replicas"]
    assert "slow" in rows[name_of(sims["slow"])]["flags"], (stage["index"], rows)
    for role in ("fast", "small"):
        assert "slow" not in rows[name_of(sims[role])]["flags"], (stage["index"], role, rows)
    assert "replica_slow" in stage["flags"]


def merged_from_ledgers(ledgers: list[dict], stage: int, name: str) -> StageStats:
    """What the workers shipped for (stage, replica), merged."""
    merged = StageStats()
    for ledger in ledgers:
        for k, by_name in ledger.get("replicas", []):
            if k == stage and name in by_name:
                merged.merge(StageStats.from_message(by_name[name]))
    return merged
