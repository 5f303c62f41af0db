"""The run's phases: one vocabulary for the sweep plan, every process, the exporter and the web UI.

A stage runs ``RAMP -> WARMUP -> MEASURE -> CLOSING``; after the last stage ``DRAIN`` waits for
requests still running, then the run is ``DONE``. ``IDLE``: before the first stage. Rules in
``loadgen/run/plan.py``; membership (which requests and tokens count) in docs/development/ARCHITECTURE.md.
A ``StrEnum``: members compare equal to their text, which is what goes on the wire (``llm_phase``),
into the exporter's ``phase`` label and into the web UI.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    IDLE = "idle"  # before the first stage
    RAMP = "ramp"  # users being started; nothing measured
    WARMUP = "warmup"  # all users run; requests sent now are not measured
    MEASURE = "measure"  # the window: requests sent now belong to the stage
    CLOSING = "closing"  # the window closed; the server watch is read; nothing counts
    DRAIN = "drain"  # after the last window: no new requests, waiting for running ones
    DONE = "done"  # the sweep is over

    @property
    def sends_requests(self) -> bool:
        """Users send new requests in this phase (not while draining or done)."""
        return self not in (Phase.DRAIN, Phase.DONE)
