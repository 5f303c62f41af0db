"""The read timeout of a stream as ONE idle deadline per request, instead of one timer per read.

gevent implements a socket timeout by starting a fresh ``gevent.Timeout`` (a timer watcher, an
exception instance, start, cancel) around every ``recv`` that has to wait: at one SSE chunk per
read that was ~11 % of the client's CPU at 1,024 streams. The meaning we keep is an *idle*
timeout: a request fails with ``read_timeout`` when no body bytes arrive for ``idle_timeout_s``;
a slow stream whose gaps are all shorter is never cut, however long it runs in total.

How: the reading loop stores the time of its last read in ``IdleDeadline.last_read_s`` (one
float store per read, on the clock the reads are stamped with). One timer per request is due at
``last_read_s + idle_timeout_s``; when it fires, ``idle_remaining_s`` decides:

    remaining_s = last_read_s + idle_timeout_s - now_s
    remaining_s > 0   bytes came since the timer was set: set it again for remaining_s
    remaining_s <= 0  nothing for idle_timeout_s: raise IdleTimeout in the reading greenlet

So a stall is detected at last_read_s + idle_timeout_s (plus the event loop's lateness), and a
stream that keeps sending costs one timer wake-up per ``idle_timeout_s``, not one per read.
"""

from __future__ import annotations

from collections.abc import Callable

from gevent import get_hub, getcurrent


class IdleTimeout(TimeoutError):
    """No body bytes within the read timeout (raised into the reading greenlet by its deadline)."""


def idle_remaining_s(now_s: float, last_read_s: float, idle_timeout_s: float) -> float:
    """Seconds left before the idle deadline: ``last_read_s + idle_timeout_s - now_s``.

    ``<= 0`` means the deadline passed with no read since ``now_s - idle_timeout_s``. Pure."""
    return last_read_s + idle_timeout_s - now_s


class IdleDeadline:
    """The idle deadline of one request at a time (see the module docstring).

    ``start(now_s)`` arms it for the calling greenlet, the reader sets ``last_read_s`` after each
    read, ``cancel()`` (always, in a ``finally``) disarms it. ``make_timer(delay_s)`` returns an
    unstarted gevent-style timer (``start(callback, update=...)``, ``stop()``, ``close()``);
    the default is the hub's loop timer, tests pass a fake one.
    """

    __slots__ = ("idle_timeout_s", "last_read_s", "_clock", "_make_timer", "_timer", "_reader", "rearms")

    def __init__(self, idle_timeout_s: float, clock: Callable[[], float],
                 make_timer: Callable[[float], object] | None = None):
        self.idle_timeout_s = idle_timeout_s
        self.last_read_s = 0.0
        self._clock = clock
        self._make_timer = make_timer
        self._timer = None
        self._reader = None
        self.rearms = 0  # how many times the timer was set again because bytes had come

    def start(self, now_s: float, reader=None) -> None:
        """Arm for ``reader`` (default: the calling greenlet), the last read being at ``now_s``."""
        self.last_read_s = now_s
        self._reader = reader if reader is not None else getcurrent()
        self._arm(self.idle_timeout_s)

    def _arm(self, delay_s: float) -> None:
        timer = (self._make_timer or get_hub().loop.timer)(delay_s)
        # update=True: read the loop's clock now, or a stale loop time would make it fire early.
        timer.start(self._fire, update=True)
        self._timer = timer

    def _fire(self) -> None:
        """The timer's callback, in the hub: set it again, or raise the timeout into the reader."""
        self._close_timer()
        reader = self._reader
        if reader is None or reader.dead:
            return
        remaining_s = idle_remaining_s(self._clock(), self.last_read_s, self.idle_timeout_s)
        if remaining_s > 0:
            self.rearms += 1
            self._arm(remaining_s)
            return
        self._reader = None
        reader.throw(IdleTimeout(f"no bytes within the read timeout ({self.idle_timeout_s:g} s)"))

    def cancel(self) -> None:
        """Disarm (idempotent). Call before the reading greenlet does anything else."""
        self._reader = None
        self._close_timer()

    def _close_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.stop()
            timer.close()
