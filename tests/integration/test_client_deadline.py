"""The read timeout as one idle deadline per request (loadgen.wire.deadline) and in the client.

Pure part: the re-arm decision and the timer's behaviour with a fake clock and a fake timer (no
sleeps). Then real sockets: a scripted server on 127.0.0.1 and the simulator prove that a stall
fails as read_timeout about read_timeout after the last byte, and that a slow stream whose total
time exceeds the read timeout, but whose gaps do not, is not cut.
"""

from __future__ import annotations

import time

import gevent
import orjson
import pytest

from loadgen import errors
from loadgen.sim.launch import running_sim
from loadgen.stats.records import RequestRecord
from loadgen.wire.client import StreamClient
from loadgen.wire.deadline import IdleDeadline, IdleTimeout, idle_remaining_s
from tests.support.rawserver import (
    SSE_HEADERS,
    chunk,
    completion_chunk,
    event,
    raw_server,
    read_request,
    stream_tokens,
)

# How late a deadline may fire after last byte + read timeout on a busy 2-core machine.
LATE_BOUND_S = 0.3


# -- pure: the decision, a fake clock, a fake timer -------------------------------------------------
def test_remaining_is_last_read_plus_timeout_minus_now():
    assert idle_remaining_s(now_s=10.0, last_read_s=9.5, idle_timeout_s=2.0) == pytest.approx(1.5)
    assert idle_remaining_s(now_s=12.0, last_read_s=10.0, idle_timeout_s=2.0) == 0.0  # due: expired
    assert idle_remaining_s(now_s=13.0, last_read_s=10.0, idle_timeout_s=2.0) < 0


class FakeClock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class FakeTimer:
    def __init__(self, log: list, delay_s: float):
        self.log, self.delay_s = log, delay_s
        self.callback = None
        self.closed = False
        log.append(self)

    def start(self, callback, update=None):
        assert update is True  # a stale loop clock must not make it fire early
        self.callback = callback

    def stop(self):
        self.callback = None

    def close(self):
        self.closed = True


class FakeReader:
    dead = False

    def __init__(self):
        self.thrown: list[BaseException] = []

    def throw(self, exc):
        self.thrown.append(exc)


def armed(clock, timeout_s=2.0):
    timers: list[FakeTimer] = []
    deadline = IdleDeadline(timeout_s, clock, make_timer=lambda d: FakeTimer(timers, d))
    reader = FakeReader()
    deadline.start(clock(), reader)
    return deadline, timers, reader


def fire(clock, timer: FakeTimer) -> None:
    """Advance the fake clock to the timer's due time and run its callback as the hub would."""
    clock.now_s += timer.delay_s
    timer.callback()


def test_no_read_before_the_deadline_raises_into_the_reader():
    clock = FakeClock()
    deadline, timers, reader = armed(clock)
    assert [t.delay_s for t in timers] == [2.0]
    fire(clock, timers[0])
    assert len(reader.thrown) == 1 and isinstance(reader.thrown[0], IdleTimeout)
    assert "2 s" in str(reader.thrown[0]) and timers[0].closed and len(timers) == 1


def test_a_read_since_the_timer_was_set_re_arms_it_for_the_time_left():
    clock = FakeClock()
    deadline, timers, reader = armed(clock)
    clock.now_s += 0.7
    deadline.last_read_s = clock.now_s  # bytes at +0.7 s
    clock.now_s -= 0.7
    fire(clock, timers[0])  # at +2.0 s: 0.7 s of the new 2 s window has passed
    assert reader.thrown == [] and deadline.rearms == 1
    assert timers[1].delay_s == pytest.approx(0.7)
    fire(clock, timers[1])  # +2.7 s = last read + 2 s, nothing since
    assert len(reader.thrown) == 1


def test_a_slow_stream_with_gaps_under_the_timeout_is_never_cut_however_long():
    """Reads every 1.5 s for 60 s against a 2 s timeout: the timer only re-arms."""
    clock = FakeClock()
    deadline, timers, reader = armed(clock)
    start, next_read = clock.now_s, clock.now_s + 1.5
    while clock.now_s - start < 60:
        due = clock.now_s + timers[-1].delay_s
        while next_read <= due:  # the reads that happen before the timer fires
            deadline.last_read_s = next_read
            next_read += 1.5
        fire(clock, timers[-1])
        assert reader.thrown == []
    assert deadline.rearms == len(timers) - 1 >= 20


def test_cancel_disarms_and_a_dead_reader_is_left_alone():
    clock = FakeClock()
    deadline, timers, reader = armed(clock)
    deadline.cancel()
    assert timers[0].closed and timers[0].callback is None
    deadline.cancel()  # idempotent
    deadline2, timers2, reader2 = armed(clock)
    reader2.dead = True
    fire(clock, timers2[0])
    assert reader2.thrown == [] and len(timers2) == 1


# -- real sockets: a scripted server in this process ------------------------------------------------
def stamped_stream(client: StreamClient, expected: int):
    """Run one stream; returns (result, arrival times of token batches, time the call returned)."""
    arrivals: list[float] = []
    record = RequestRecord(time.perf_counter(), expected, "completions")
    result, _ = client.stream("/v1/completions", b"{}", record, on_tokens=lambda n: arrivals.append(time.perf_counter()))
    return result, arrivals, time.perf_counter()


def test_a_stall_after_some_chunks_fails_as_read_timeout_about_the_timeout_after_the_last_byte():
    sent: list[float] = []

    def handler(sock):
        read_request(sock)
        sock.sendall(SSE_HEADERS)
        for i in range(5):  # 0.5 s of chunks: more than the read timeout after the headers
            gevent.sleep(0.1)
            sock.sendall(chunk(event(completion_chunk("a", usage={"prompt_tokens": 1, "completion_tokens": i + 1}))))
            sent.append(time.perf_counter())
        gevent.sleep(5)

    with raw_server(handler) as url:
        client = StreamClient(url, read_timeout_s=0.4, connect_timeout_s=2)
        result, arrivals, t_end = stamped_stream(client, 5)
        client.close()
    assert result.error_kind == errors.READ_TIMEOUT and result.completion_tokens == 5, result
    assert "0.4 s" in result.error_message
    idle_s = t_end - arrivals[-1]
    assert 0.4 <= idle_s < 0.4 + LATE_BOUND_S, idle_s


def test_a_slow_stream_longer_than_the_read_timeout_with_shorter_gaps_is_not_cut():
    with raw_server(lambda s: stream_tokens(s, 8, first_delay_s=0.25, gap_s=0.25)) as url:
        client = StreamClient(url, read_timeout_s=0.4, connect_timeout_s=2)
        result, _, _ = stamped_stream(client, 8)
        rearms = client._deadline.rearms
        client.close()
    assert result.ok, (result.error_kind, result.error_message)
    assert result.completion_tokens == 8 and result.e2e_s > 4 * 0.4
    assert rearms >= 3  # the deadline fired during the stream and was set again each time


def test_the_socket_timeout_still_guards_the_headers_of_the_next_request_on_the_connection():
    """The body is read without the socket's timeout; the connection goes back to the pool with
    it intact: a reused connection whose server never answers fails as read_timeout."""
    connections = []

    def handler(sock):
        connections.append(sock)
        stream_tokens(sock, 2, 0.0, 0.0)
        read_request(sock)  # the second request on this connection: no answer
        gevent.sleep(5)

    with raw_server(handler) as url:
        client = StreamClient(url, read_timeout_s=0.4, connect_timeout_s=2)
        first, _, _ = stamped_stream(client, 2)
        t0 = time.perf_counter()
        second, _, t_end = stamped_stream(client, 2)
        client.close()
    assert first.ok and len(connections) == 1
    assert second.error_kind == errors.READ_TIMEOUT and 0.4 <= t_end - t0 < 0.4 + LATE_BOUND_S


def test_no_deadline_outlives_its_request():
    """After a complete stream, and after a stream whose greenlet was killed, nothing fires later."""

    def handler(sock):
        stream_tokens(sock, 2, 0.0, 0.0)
        read_request(sock)
        sock.sendall(SSE_HEADERS)
        gevent.sleep(5)

    with raw_server(handler) as url:
        client = StreamClient(url, read_timeout_s=0.3, connect_timeout_s=2)
        first, _, _ = stamped_stream(client, 2)
        gevent.sleep(0.5)  # past the read timeout: a leaked timer would raise into this greenlet
        victim = gevent.spawn(stamped_stream, client, 2)
        gevent.sleep(0.1)
        victim.kill()  # Locust stopping a user mid-stream
        gevent.sleep(0.5)
        timer_left = client._deadline._timer
        client.close()
    assert first.ok and victim.dead and timer_left is None


# -- the simulator -----------------------------------------------------------------------------------
def sim_body(tokens: int) -> bytes:
    return orjson.dumps({"model": "m", "prompt": [1, 2, 3], "max_tokens": tokens, "min_tokens": tokens,
                         "ignore_eos": True, "stream": True,
                         "stream_options": {"include_usage": True, "continuous_usage_stats": True}})


def sim_stream(url: str, tokens: int, read_timeout_s: float):
    client = StreamClient(url, read_timeout_s=read_timeout_s, connect_timeout_s=2)
    arrivals: list[float] = []
    record = RequestRecord(time.perf_counter(), tokens, "completions")
    try:
        result, _ = client.stream("/v1/completions", sim_body(tokens), record,
                                  on_tokens=lambda n: arrivals.append(time.perf_counter()))
    finally:
        client.close()
    return result, arrivals, time.perf_counter()


@pytest.mark.integration
def test_simulator_slow_stream_is_not_cut_and_a_stalled_one_fails_on_time():
    # 8 tokens 300 ms apart: 2.2 s in all against a 0.5 s read timeout
    with running_sim("--preset", "fixed", "--ttft-ms", "100", "--itl-ms", "300") as sim:
        slow, _, _ = sim_stream(sim.url, 8, read_timeout_s=0.5)
    assert slow.ok and slow.completion_tokens == 8 and slow.e2e_s > 2.0, slow
    # every request stalls after 1..7 tokens and holds the socket
    with running_sim("--preset", "fixed", "--ttft-ms", "100", "--itl-ms", "100", "--fault-stall", "1",
                     "--stall-max-s", "10") as sim:
        stalled, arrivals, t_end = sim_stream(sim.url, 8, read_timeout_s=0.5)
    assert stalled.error_kind == errors.READ_TIMEOUT and 1 <= stalled.completion_tokens < 8, stalled
    assert 0.5 <= t_end - arrivals[-1] < 0.5 + LATE_BOUND_S


# -- the pool's reuse check (loadgen.wire.gevent_io.is_idle_and_open) ------------------------------------
def test_the_reuse_check_answers_like_geventhttpclient_without_yielding():
    """Under Locust's monkey-patching geventhttpclient's check is gevent's select, which yields
    (gevent.sleep(0)) even with timeout 0: between a request's send time and its send. Ours
    must not: a greenlet spawned before the check has not run after it."""
    from gevent import socket as gsocket

    from loadgen.wire.gevent_io import is_idle_and_open

    a, b = gsocket.socketpair()
    ran = []
    gevent.spawn(ran.append, 1)
    assert is_idle_and_open(a) and ran == []  # idle and open; no switch happened
    b.sendall(b"x")
    assert not is_idle_and_open(a)  # stray bytes: not reusable
    a.recv(1)
    b.close()
    assert not is_idle_and_open(a)  # the peer's FIN: not reusable
    a.close()
    assert not is_idle_and_open(a) and not is_idle_and_open(None)
    gevent.sleep(0)
    assert ran == [1]
