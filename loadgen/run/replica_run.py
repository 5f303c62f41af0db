"""Several replicas in a run (docs/replicas.md): what the session does for them, in one place.

At the start: each replica's start check and the fleet's KV capacity, the sum
(``loadgen.server.replicas``), which the guard then uses (hosts spread by the client: also each
replica's share against its own capacity, ``kv_guard.decide_spread``). During the run: one server
watch per replica (``loadgen.server.replica_watch``). In each stage row: ``replicas`` {name: row},
``replica_skew`` and the replicas' flags (``loadgen.stats.replicas``), and a console line.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.errors import ConfigError
from loadgen.run.kv_guard import spread_ceiling
from loadgen.server.overload import OverCapacityRule
from loadgen.server.replica_watch import ReplicaWatch, over_capacity_evidence
from loadgen.server.replicas import check_replicas, router_workers, summed_capacity
from loadgen.server.watch import ServerWatch
from loadgen.stats.metrics import num
from loadgen.stats.replicas import judge, replica_rows
from loadgen.wire.replicas import UNATTRIBUTED
from loadgen.workload.mix import scenario_mix


class ReplicaRun:
    """The replicas of one run (``rt.targets``: ``loadgen.wire.replicas.Targets``); inert with one host."""

    def __init__(self, rt, say: Callable[[str], None]):
        self.rt, self.say = rt, say
        self.capacities: dict[str, int | None] = {}
        self.watch: ReplicaWatch | None = None

    @property
    def active(self) -> bool:
        """Replicas are read (spread hosts or --replica-metrics engines) or counted (a router's header)."""
        return bool(self.rt.targets.watched) or self.rt.targets.per_replica

    def discover(self, host: str) -> None:
        """One --host and no engines named: ask it for the backends it routes to (a router that
        lists them); found ones are then read as --replica-metrics would name them."""
        rt = self.rt
        if rt.targets.watched or not host:
            return
        path, urls = router_workers(host, rt.api_key, rt.scenario.request.headers)
        urls = tuple(dict.fromkeys(urls))
        if not urls:
            return
        try:
            rt.targets.use_engines(urls)
        except ConfigError as exc:  # two URLs of one engine: read none rather than one twice
            self.say(f"llm-loadgen: warning: {exc}; name the engines with --replica-metrics")
            return
        self.say(f"llm-loadgen: {host} is a router: GET {path} lists {len(urls)} engines "
                 f"({', '.join(rt.targets.names)}); each is read for its KV capacity and /metrics")

    def fleet_capacity(self, model: str | None, capacity):
        """``start_check.preflight``'s ``fleet`` hook: each replica checked, the fleet's capacity
        (the sum; the scenario's guard.kv_capacity_tokens wins as the fleet's). Hosts spread by the
        client with every capacity known also give the guard each replica's, for its share check."""
        rt = self.rt
        targets, sc = rt.targets, rt.scenario
        found = check_replicas(targets.watched, sc, rt.api_key, model, self.say, spread=bool(targets.spread))
        self.capacities = {r.name: r.capacity.tokens for r in found}
        fleet = summed_capacity(found, sc.guard.kv_capacity_tokens)
        if fleet.tokens is not None and fleet.source == "replicas":
            self.say(f"llm-loadgen: KV capacity of the {len(found)} replicas: {fleet.detail}")
        return fleet

    def guard_spread(self) -> tuple[tuple[str, int], ...]:
        """(name, tokens) per spread host when every one is known, for ``StageGuard.spread``."""
        if not self.rt.targets.spread or None in self.capacities.values():
            return ()
        return tuple(self.capacities.items())

    def start_watch(self, interval_s: float, rule: OverCapacityRule) -> None:
        rt, targets = self.rt, self.rt.targets
        if not targets.watched:
            return

        def make(replica) -> ServerWatch:
            return ServerWatch(replica.root, rt.api_key, None, interval_s, rule=rule,
                               headers=rt.scenario.request.headers)

        self.watch = ReplicaWatch(targets.watched, make).start()

    def begin_stage(self, index: int, concurrency: float | None) -> None:
        if self.watch is not None:
            self.watch.begin_stage(index, concurrency)

    def end_stage(self, index: int) -> dict[str, dict] | None:
        return self.watch.end_stage(index) if self.watch is not None else None

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()

    def into_summary(self, summary: dict) -> None:
        """summary.json ``replicas``: the layout, the policy, each replica's KV capacity; hosts
        spread by the client in a concurrency sweep also lower ``guard.max_concurrency`` to
        ``kv_guard.spread_ceiling`` (a rate sweep's guard projects against the sum, as ``decide_rate``)."""
        if not self.active:
            return
        targets, sc = self.rt.targets, self.rt.scenario
        summary["replicas"] = {
            "layout": "client" if targets.spread else "router",
            "policy": sc.replicas.policy if targets.spread else None,
            "names": list(targets.names),
            "capacity_tokens": dict(self.capacities),
            "upstream_header": targets.upstream_header,
            "unattributed": UNATTRIBUTED if targets.upstream_header else None,
        }
        spread = self.guard_spread()
        if spread and not sc.open_loop and sc.guard.kv_capacity_tokens is None \
                and summary["guard"].get("max_concurrency") is not None:
            ceiling = spread_ceiling(spread, scenario_mix(sc, self.rt.dataset), sc.guard.margin)
            summary["guard"]["max_concurrency"] = min(ceiling, summary["guard"]["max_concurrency"])

    def add_to_row(self, row: dict, stats: dict | None, servers: dict[str, dict] | None) -> str | None:
        """The stage row gets ``replicas``, ``replica_skew`` and the replicas' stage flags; returns
        the console line (None with one host). ``stats``: the collector's {name: StageStats} of
        the stage; ``servers``: the replica watch's figures of its window."""
        if not self.active:
            return None
        sc = self.rt.scenario
        names = self.rt.targets.names
        rows = replica_rows(names, (stats or {}) if self.rt.targets.per_replica else None, row.get("window_s"),
                            self.capacities, servers)
        skew, flags = judge(rows, names or tuple(rows), sc.replicas.share_ratio_max, sc.replicas.slow_ratio)
        row["replicas"], row["replica_skew"] = rows, skew
        if evidence := over_capacity_evidence(servers):
            row["replica_over_capacity"] = evidence
            flags.append("server_over_capacity")
        row["flags"] = [*row["flags"], *(f for f in flags if f not in row["flags"])]
        return replicas_line(row)


def replicas_line(row: dict) -> str | None:
    """``llm-loadgen: stage 2 replicas (skew 1.02): a:1 40 reqs 380 tok/s TTFT p99 25 ms KV 31%; ...``"""
    rows = row.get("replicas")
    if not rows:
        return None
    parts = []
    for name, fig in rows.items():
        server = fig.get("server") or {}
        kv = server.get("kv_usage_mean")
        extra = "".join([f", {fig['error_count']} errors" if fig.get("error_count") else "",
                         f" KV {kv:.0%}" if kv is not None else "",
                         f" [{','.join(fig['flags'])}]" if fig.get("flags") else ""])
        ttft = fig.get("ttft_p99_s")
        parts.append(f"{name} {fig.get('requests', '-')} reqs {num(fig.get('output_tokens_per_s'))} tok/s TTFT p99 "
                     f"{'-' if ttft is None else f'{ttft * 1000:.0f}'} ms{extra}")
    skew = row.get("replica_skew")
    return (f"llm-loadgen: stage {row['index']} replicas (skew {'-' if skew is None else f'{skew:.2f}'}): "
            + "; ".join(parts))
