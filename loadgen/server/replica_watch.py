"""The server watch over several replicas (docs/replicas.md): one ``ServerWatch`` per replica (each
spread host, or each engine behind a router), read at the same window edges.

Each replica's watch judges its own polls (``loadgen.server.overload``) against its share of the
stage's load, concurrency / replicas (what an even spread gives it), and its ``server`` object is
the replica's row's ``server`` (``loadgen.stats.replicas``). The stage is over capacity when one
replica is: a fleet with one replica thrashing is not measuring the others' ceiling.
"""

from __future__ import annotations

from collections.abc import Callable

import gevent

from loadgen.server.watch import ServerWatch

# the figures of a replica's ``server`` object its row keeps (loadgen.server.overload, loadgen.server.window)
REPLICA_SERVER_FIELDS = ("kv_usage_mean", "kv_usage_max", "waiting_max", "running_max", "preemptions",
                         "output_tokens", "output_tokens_per_s", "over_capacity", "over_capacity_evidence",
                         "disabled", "ttft", "itl", "e2e")


class ReplicaWatch:
    """``watches``: {replica name: its ServerWatch} (built by ``make(replica)``, in order)."""

    def __init__(self, replicas, make: Callable[[object], ServerWatch]):
        self.watches = {r.name: make(r) for r in replicas}

    def start(self) -> ReplicaWatch:
        for watch in self.watches.values():
            watch.start()
        return self

    def _each(self, call: Callable[[ServerWatch], object]) -> dict[str, object]:
        """``call`` on every replica's watch at once (edge reads of a slow replica do not move the others')."""
        jobs = {name: gevent.spawn(call, watch) for name, watch in self.watches.items()}
        return {name: job.get() for name, job in jobs.items()}

    def begin_stage(self, index: int, concurrency: float | None = None) -> None:
        share = None if concurrency is None else concurrency / len(self.watches)
        self._each(lambda watch: watch.begin_stage(index, share))

    def end_stage(self, index: int) -> dict[str, dict]:
        """{replica name: the figures of its ``server`` object kept in its row (REPLICA_SERVER_FIELDS)}."""
        ended = self._each(lambda watch: watch.end_stage(index))
        return {name: {key: out.get(key) for key in REPLICA_SERVER_FIELDS} for name, out in ended.items()}

    def stop(self) -> None:
        for watch in self.watches.values():
            watch.stop()


def over_capacity_evidence(servers: dict[str, dict] | None) -> list[str]:
    """The stage's evidence of a replica over capacity: each such replica's, named."""
    return [f"{name}: {line}" for name, out in (servers or {}).items() if out.get("over_capacity")
            for line in out.get("over_capacity_evidence") or ()]
