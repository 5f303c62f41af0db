"""The pure parts of tests/support/netlag.py (the delaying relay the multi-host tests use): no sockets."""

from __future__ import annotations

import pytest

from tests.support.netlag import DelaySchedule, PhaseSpy


def test_delay_schedule_adds_seeded_jitter_and_never_reorders():
    a, b = DelaySchedule(0.025, 0.005, seed=7), DelaySchedule(0.025, 0.005, seed=7)
    arrivals = [i * 0.001 for i in range(2000)]  # 1 ms apart: jitter (±5 ms) would reorder them
    out = [a.release_s(t) for t in arrivals]
    assert out == [b.release_s(t) for t in arrivals]  # seeded: the same schedule run to run
    assert out == sorted(out)
    assert all(t + 0.020 <= r for t, r in zip(arrivals, out, strict=True))
    assert max(r - t for t, r in zip(arrivals, out, strict=True)) <= 0.030 + 1e-9
    spread = {round(r - t, 4) for t, r in zip(arrivals[::50], out[::50], strict=True)}
    assert len(spread) > 5, "the jitter varies"
    assert DelaySchedule(0.025, 0.0, seed=1).release_s(1.0) == 1.025
    with pytest.raises(ValueError, match="jitter"):
        DelaySchedule(0.005, 0.010, seed=1)


def test_phase_spy_finds_each_new_phase_in_a_stream_split_anywhere():
    from locust.rpc.protocol import Message

    wire = b"".join(Message(t, d, "m").serialize() for t, d in [
        ("heartbeat", {"state": "running"}), ("llm_phase", {"stage": 0, "kind": "measure", "seq": 3}),
        ("llm_phase", {"stage": 0, "kind": "measure", "seq": 3}),  # re-broadcast on the next tick
        ("spawn", {"user_classes_count": {"LLMUser": 4}}), ("llm_phase", {"stage": 0, "kind": "closing", "seq": 4})])
    for cut in range(1, len(wire)):
        spy = PhaseSpy()
        found = spy.feed(wire[:cut]) + spy.feed(wire[cut:])
        assert [(p["seq"], p["kind"]) for p in found] == [(3, "measure"), (4, "closing")], cut
