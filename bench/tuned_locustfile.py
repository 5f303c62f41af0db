"""The real locustfile with benchmark knobs applied from the environment (bench/ only).

Knobs, to measure what a client change would buy before anyone makes it in loadgen/:

- ``LLM_BENCH_RECV_BYTES=N``: bytes per ``recv`` (loadgen.wire.gevent_io.RECV_BYTES).
- ``LLM_BENCH_YIELD_BYTES=N``: before reading again, yield to the other greenlets
  (``gevent.sleep(0)``) when the previous read returned >= N bytes. A gevent socket read only
  yields when the kernel buffer is empty, so a stream whose whole body is already buffered (a fast
  server, a client that fell behind) is parsed to its end in one go while every other stream
  waits: their first tokens are then stamped late by the sum of those turns. Yielding before the
  next read (never between a read and its timestamp) bounds one turn to about N bytes of work.

- ``LLM_BENCH_SLICE_MS=X``: the same yield, decided by time instead: yield before reading again
  when this stream has run for more than X ms since it last yielded.

Everything else is exactly ``locustfile.py``.
"""

import os

import gevent

import loadgen.wire.client
import loadgen.wire.gevent_io

if os.environ.get("LLM_BENCH_RECV_BYTES"):
    loadgen.wire.gevent_io.RECV_BYTES = int(os.environ["LLM_BENCH_RECV_BYTES"])

if os.environ.get("LLM_BENCH_YIELD_BYTES"):
    _yield_bytes = int(os.environ["LLM_BENCH_YIELD_BYTES"])
    _read = loadgen.wire.client.read_available
    _big_read: set[int] = set()  # id(resp) of responses whose last read was large

    def _fair_read_available(resp, *args) -> bytes:
        key = id(resp)
        if key in _big_read:
            _big_read.discard(key)
            gevent.sleep(0)
        data = _read(resp, *args)
        if len(data) >= _yield_bytes:
            _big_read.add(key)
        return data

    loadgen.wire.client.read_available = _fair_read_available

if os.environ.get("LLM_BENCH_SLICE_MS"):
    import time

    _slice_s = float(os.environ["LLM_BENCH_SLICE_MS"]) / 1000.0
    _read_sliced = loadgen.wire.client.read_available
    _last_yield: dict[int, float] = {}  # id(resp) -> perf_counter() when its greenlet last yielded

    def _sliced_read_available(resp, *args) -> bytes:
        key, now = id(resp), time.perf_counter()
        last = _last_yield.setdefault(key, now)
        if now - last > _slice_s:
            gevent.sleep(0)
            _last_yield[key] = time.perf_counter()
        data = _read_sliced(resp, *args)
        if not data:
            _last_yield.pop(key, None)
        return data

    loadgen.wire.client.read_available = _sliced_read_available

from locustfile import *  # noqa: E402,F401,F403
