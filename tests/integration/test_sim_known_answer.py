"""The simulator's fixed timing model against its known answer on the client's clock: TTFT 200 ms and
the configured gaps (hundreds of streams at once: test_sim_http, bounded by the bursts it measured).

Solo (``pytest.mark.solo``: nothing else runs beside it): the answer is absolute wall time, and a
busy machine delays every write of the simulator and every read of the client; a 5 % bound holds on
a machine the file has to itself (the rest of test_sim_http.py, on the same simulator, runs shared).
"""

from __future__ import annotations

import statistics

import gevent
import pytest

from loadgen.sim.launch import running_sim
from tests.support.raw_client import request
from tests.support.sim_http import COMPLETION, content_times

pytestmark = [pytest.mark.integration, pytest.mark.solo]


@pytest.fixture(scope="module")
def fixed_sim():
    with running_sim("--preset", "fixed") as sim:
        yield sim.url


def test_known_answer_ttft_200ms_itl_20ms_100_tokens(fixed_sim):
    def one(_):
        resp = request(fixed_sim, "POST", "/v1/completions", COMPLETION)
        times = content_times(resp)
        assert resp.status == 200 and resp.done and len(times) == 100
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        return times[0] - resp.t_sent, statistics.mean(gaps)

    results = [g.get() for g in [gevent.spawn(one, i) for i in range(8)]]
    for ttft, itl in results:
        assert ttft == pytest.approx(0.200, rel=0.05)
        assert itl == pytest.approx(0.020, rel=0.05)


def test_known_answer_four_tokens_per_chunk_gives_80ms_gaps():
    with running_sim("--preset", "fixed", "--tokens-per-chunk", "4") as sim:
        url, _ = sim.url, sim.proc
        resp = request(url, "POST", "/v1/completions", {**COMPLETION, "stream_options": {
            "include_usage": True, "continuous_usage_stats": True}})
    events = resp.json_events()
    chunks = [e for e in events if e["choices"]]
    assert [len(e["choices"][0]["text"].split()) for e in chunks] == [4] * 25
    assert [e["usage"]["completion_tokens"] for e in chunks] == list(range(4, 101, 4))
    times = [t for t, p in resp.events if b'"text":" ' in p]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert times[0] - resp.t_sent == pytest.approx(0.200, rel=0.05)
    assert statistics.mean(gaps) == pytest.approx(0.080, rel=0.05)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 100
