"""Trace replay (pure): due times from the lines' timestamps, scaled, shared between processes
and cycling; a timestamped dataset runs as one rate stage at its mean rate."""

from __future__ import annotations

import pytest

from loadgen.config import ConfigError, build_scenario
from loadgen.workload.dataset import DatasetRequest, load_dataset
from loadgen.workload.trace import TraceSchedule, is_trace, trace_rate_per_s, trace_scenario

TRACE = [DatasetRequest(i + 1, 100, 10, timestamp_ms=t) for i, t in enumerate([1000, 1500, 1500, 3000, 4000])]


def test_due_times_follow_the_timestamps_scaled_and_cycle():
    s = TraceSchedule(TRACE, 0, 1, speedup=2.0)
    got = [s.next() for _ in range(7)]
    period = (3.0 + 3.0 / 4) / 2  # (span + mean gap) / speedup
    assert [d for d, _ in got] == pytest.approx([0, 0.25, 0.25, 1.0, 1.5, period, period + 0.25])
    assert [r.line for _, r in got] == [1, 2, 3, 4, 5, 1, 2]


def test_process_shares_are_disjoint_and_keep_their_own_times():
    a, b = TraceSchedule(TRACE, 0, 2, 1.0), TraceSchedule(TRACE, 1, 2, 1.0)
    first = [a.next() for _ in range(3)]
    second = [b.next() for _ in range(2)]
    assert [r.line for _, r in first] == [1, 3, 5] and [r.line for _, r in second] == [2, 4]
    assert [d for d, _ in second] == pytest.approx([0.5, 2.0])
    assert TraceSchedule(TRACE[:1], 1, 2, 1.0).next() is None  # more processes than lines


def test_a_trace_runs_as_one_rate_stage_at_its_mean_rate():
    assert trace_rate_per_s(TRACE, 1.0) == pytest.approx(5 / 3.75)
    sc = trace_scenario(build_scenario({}), TRACE)
    assert sc.open_loop and sc.loads() == [pytest.approx(5 / 3.75)]
    assert not trace_scenario(build_scenario({}), [DatasetRequest(1, 10, 1)]).open_loop
    assert not is_trace(None)
    with pytest.raises(ConfigError, match="workload.turns"):
        trace_scenario(build_scenario({"workload": {"turns": 2}}), TRACE)


def test_the_bundled_mooncake_trace_loads_as_a_trace():
    lines = load_dataset("config/datasets/mooncake-trace.jsonl", "completions")
    assert is_trace(lines) and lines[0].hash_ids == (0, 1, 2) and lines[0].input_tokens == 1536
