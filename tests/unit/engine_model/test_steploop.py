"""The shared step loop (loadgen.engine_model.steploop) on a fake clock: where steps start, t_scheduled, delivery."""

from __future__ import annotations

import pytest

from loadgen.engine_model.engine import Engine, EngineParams, SimRequest
from loadgen.engine_model.steploop import StepLoop

PARAMS = EngineParams(kv_tokens=10_000, step_base_s=0.010, step_per_seq_s=0.0, step_per_prefill_token_s=0.0)


class LateClock:
    """Wall time that runs ``late_s`` past every deadline it sleeps to (a busy machine)."""

    def __init__(self, engine: Engine, late_s: float):
        self.engine, self.late_s, self.t = engine, late_s, 100.0
        self.due: list[SimRequest] = []

    def now(self) -> float:
        return self.t

    def wait_for_arrival(self) -> float | None:
        if not self.due:
            return None
        self.engine.submit(self.due.pop(0))
        return self.t

    def admit_arrivals(self, start: float) -> None:
        pass

    def sleep_until(self, end: float) -> float:
        self.t = end + self.late_s
        return self.t


@pytest.mark.parametrize("late_s", [0.0, 0.004])
def test_a_late_clock_starts_the_next_step_when_it_wakes_and_delivers_then(late_s):
    delivered: list[tuple[int, float]] = []
    engine = Engine(PARAMS)
    loop = StepLoop(engine, lambda events, t: delivered.extend((n, t) for _, n, _ in events), time_scale=2.0)
    clock = LateClock(engine, late_s)
    req = SimRequest(10, 3)
    clock.due.append(req)
    while loop.step(clock):
        pass
    step_wall = 0.010 / 2.0  # time_scale 2: a 10 ms step sleeps 5 ms
    ends = [100.0 + k * (step_wall + late_s) + step_wall + late_s for k in range(3)]
    assert [n for n, _ in delivered] == [1, 1, 1] and [t for _, t in delivered] == pytest.approx(ends)
    assert req.t_scheduled == 100.0 and loop.steps_total == 3
