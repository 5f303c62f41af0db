"""Coordinated omission's known answer in virtual time: the run's own plan and accounting played by
the what-if on the simulator's engine (``loadgen.whatif.virtual_sweep``), the closed loop the wall-clock
run in tests/integration/test_open_loop_e2e.py once measured beside its open loop.

The engine of that test: 8 slots, a step of 10 ms + 1 ms per running request, 64 + 20 tokens: a
full batch decodes a request in ~20 x 18 ms = 0.36 s, so the server completes ~22 requests/s at
most. At 40 req/s (constant arrivals) the queue grows by 18 a second from the stage's start, so a
request sent t s into the stage waits ~0.82 t s: its TTFT grows through the window (p99 / p50 ~1.65
over 2 + 8 s). A closed loop at the window's mean concurrency (~134 users) waits about that p50 for
every request, because it sends only as requests finish: its p99 is its p50 (FIFO, a full queue
ahead of every request), and the open loop's p99 is far above it.
"""

from __future__ import annotations

import pytest

from loadgen.run.plan import TICK_S
from loadgen.sim.config import SimConfig
from loadgen.whatif.summary import WhatIf, predict
from loadgen.whatif.virtual_sweep import stage_rules

ENGINE = SimConfig(timing="engine", max_running=8, step_base_ms=10, step_per_seq_ms=1, step_per_prefill_token_us=20)
RULES = stage_rules(ramp_s=0, warmup_s=2, duration_s=8, turnover=False)  # the wall-clock run's stages


def test_a_saturated_server_shows_growing_ttft_open_loop_but_not_closed_loop():
    low, high = predict(ENGINE, WhatIf(64, 20, (8, 40), open_loop=True, stages=RULES))["stages"]
    (closed,) = predict(ENGINE, WhatIf(64, 20, (round(high["concurrency_mean"]),), stages=RULES))["stages"]
    # below capacity the open loop is followed; above it completions fall behind arrivals (~22 req/s)
    assert low["achieved_rate_per_s"] > 0.8 * 8 and 0.45 * 40 < high["achieved_rate_per_s"] < 0.6 * 40
    # the open loop's queue grows through the window: late arrivals wait far longer than early ones
    assert high["ttft_p50_s"] > 5 * low["ttft_p50_s"] and high["ttft_p99_s"] > 1.4 * high["ttft_p50_s"]
    # the open loop's queue grows by (offered - achieved) a second from the stage's start; its mean
    # over the window is about that growth by the window's middle (ramp tick + warmup + half the window)
    growth = (40 - high["achieved_rate_per_s"]) * (TICK_S + RULES.warmup_s + RULES.duration_s / 2)
    assert closed["concurrency"] == pytest.approx(ENGINE.max_running + growth, rel=0.1), (closed, growth)
    # the closed loop at the same mean concurrency: about the same mean wait (Little's law), but
    # every request waits about as long as the others, and the longest waits are far shorter
    assert closed["ttft_p99_s"] < 1.15 * closed["ttft_p50_s"], closed
    assert abs(closed["ttft_p50_s"] - high["ttft_p50_s"]) < 0.15 * high["ttft_p50_s"]
    assert high["ttft_p99_s"] > 1.3 * closed["ttft_p99_s"]
