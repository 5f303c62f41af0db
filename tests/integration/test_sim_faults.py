"""Seeded fault injection over real HTTP: every kind shows up at its rate, as the real servers show it."""

from __future__ import annotations

import json
from collections import Counter

import gevent
import pytest
from gevent import socket
from prometheus_client.parser import text_string_to_metric_families

from loadgen.sim.faults import FAULT_KINDS, FaultPlan
from loadgen.sim.launch import running_sim
from tests.support.raw_client import Connection, request

pytestmark = pytest.mark.integration

N_REQUESTS = 400
RATE = 0.07  # per kind; 10 kinds -> 70% of requests fail somehow, 30% succeed
MAX_TOKENS = 6
BODY = {"prompt": [7, 8, 9], "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}}


def server_closed(conn: Connection) -> bool:
    """True if the server closed the connection after the response (EOF within a short wait)."""
    conn.sock.settimeout(2.0)
    try:
        return conn.sock.recv(1) == b""
    except (TimeoutError, OSError):
        return False


def classify(resp, conn: Connection) -> tuple[str, int]:
    """(kind the client observed, content tokens received)."""
    if resp.status != 200:
        err = resp.json()["error"]
        assert err["code"] == resp.status and err["message"]
        return f"http_{resp.status}", 0
    if resp.error == "reset":
        return "reset", -1  # a RST may discard data still in the client's buffer
    events, malformed = [], False
    for _, payload in resp.events:
        if payload != b"[DONE]":
            try:
                events.append(json.loads(payload))
            except ValueError:
                malformed = True
    tokens = sum(len(e["choices"][0]["text"].split()) for e in events if e.get("choices"))
    if resp.error == "timeout":
        return "stall", tokens
    errors = [e["error"] for e in events if "error" in e]
    if errors:
        assert set(errors[0]) == {"message", "type", "code"} and resp.done
        return "stream_error", tokens
    finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices")
              and e["choices"][0]["finish_reason"]]
    if "abort" in finish:
        assert resp.done
        return "abort", tokens
    if malformed:
        assert resp.done and finish == ["length"]
        return "malformed", tokens
    if not finish and not resp.done:
        assert resp.complete and server_closed(conn)
        return "truncate", tokens
    if finish and not resp.done:
        assert resp.complete and server_closed(conn)
        return "no_done", tokens
    assert finish == ["length"] and resp.done and events[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    return "ok", tokens


def test_fault_plan_is_seeded_and_stacks_rates():
    plan = FaultPlan({"http_500": 0.25, "stall": 0.25}, seed=3)
    draws = [plan.draw(10) for _ in range(4000)]
    again = FaultPlan({"http_500": 0.25, "stall": 0.25}, seed=3)
    assert draws == [again.draw(10) for _ in range(4000)]
    kinds = Counter(d.kind if d else None for d in draws)
    assert kinds["http_500"] == pytest.approx(1000, abs=120) and kinds["stall"] == pytest.approx(1000, abs=120)
    assert all(1 <= d.at_token <= 9 for d in draws if d)


def test_every_fault_kind_appears_at_its_rate_and_is_counted_exactly():
    rates = [a for kind in FAULT_KINDS for a in ("--fault-" + kind.replace("_", "-"), str(RATE))]
    args = ("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--seed", "11", *rates)
    observed: list[tuple[str, int]] = []

    def worker(count: int) -> None:
        for _ in range(count):
            conn = Connection(url, timeout_s=1.0)
            try:
                resp = conn.request("POST", "/v1/completions", BODY)
                observed.append(classify(resp, conn))
            finally:
                conn.close()

    with running_sim(*args) as sim:
        url, _ = sim.url, sim.proc
        gevent.joinall([gevent.spawn(worker, N_REQUESTS // 40) for _ in range(40)], raise_error=True)
        text = request(url, "GET", "/metrics").body.decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    injected = {s.labels["kind"]: s.value for s in fams["llmsim_faults_injected"].samples}
    seen = Counter(kind for kind, _ in observed)
    assert sum(seen.values()) == N_REQUESTS
    expected = N_REQUESTS * RATE  # 28; binomial sd ~5.1
    for kind in FAULT_KINDS:
        assert seen[kind] == injected[kind], kind
        assert expected - 18 <= seen[kind] <= expected + 18, (kind, seen[kind])
    assert seen["ok"] == pytest.approx(N_REQUESTS * (1 - 10 * RATE), abs=30)
    # mid-stream faults fire after some tokens and before the last one
    for kind, tokens in observed:
        if kind in ("stream_error", "stall", "truncate", "abort"):
            assert 1 <= tokens < MAX_TOKENS, (kind, tokens)
        elif kind in ("no_done", "malformed", "ok"):
            assert tokens == MAX_TOKENS, (kind, tokens)


def test_stall_holds_the_socket_silently_until_the_cap():
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--fault-stall", "1",
                     "--stall-max-s", "1.5") as sim:
        url, _ = sim.url, sim.proc
        conn = Connection(url, timeout_s=0.5)
        resp = conn.request("POST", "/v1/completions", BODY)
        assert resp.error == "timeout" and resp.events  # some content, then silence
        conn.sock.settimeout(3.0)
        t0 = gevent.get_hub().loop.now()
        try:
            assert conn.sock.recv(1) == b""  # the server gives up at the cap and closes
        except socket.error:
            pass
        assert gevent.get_hub().loop.now() - t0 < 2.5
        conn.close()
