"""Several replicas of one server (docs/replicas.md): which URLs they are, and where each request goes.

Two layouts. **Spread by the client**: ``--host`` given more than once (or ``hosts:``); each request
goes to one of them, picked by ``Picker`` under ``replicas.policy``, so the client knows the
replica of every request. **Behind a router**: one ``--host`` (the router) and each engine named by
``--replica-metrics`` (its root, ``/metrics`` or ``/get_server_info`` URL): the client learns an
engine's capacity and metrics from it; a request's engine is known only when the router names it in
a response header (``replicas.upstream_header``, e.g. nginx's ``$upstream_addr``; ``upstream_name``).

A replica's ``name`` is its ``host:port`` (with the path prefix, if any): what nginx's
``$upstream_addr`` says of a backend, so the two layouts name an engine alike. Pure: no I/O.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from urllib.parse import urlsplit

from loadgen.errors import ConfigError
from loadgen.wire.endpoints import METRICS_PATH, SERVER_INFO_PATH, server_root

UNATTRIBUTED = "unattributed"  # behind a router: a request whose response named no engine we know
ENGINE_PATHS = (METRICS_PATH, SERVER_INFO_PATH)  # what --replica-metrics may end with besides the root


@dataclass(frozen=True)
class Replica:
    """One replica: ``root`` (the URL every path hangs under, ``server_root``) and its ``name``."""

    name: str
    root: str


def replica_name(root: str) -> str:
    """``http://10.0.0.5:8000/prefix`` -> ``10.0.0.5:8000/prefix``: the host:port (and prefix)."""
    parts = urlsplit(root)
    return parts.netloc + parts.path


def engine_root(url: str) -> str:
    """An engine as ``--replica-metrics`` gives it (its root, or its ``/metrics`` or
    ``/get_server_info`` URL) -> its root."""
    root = url.rstrip("/")
    for path in ENGINE_PATHS:
        if root.endswith(path):
            return root[: -len(path)]
    return server_root(root)


def replicas_from(urls, key: str, to_root=server_root) -> tuple[Replica, ...]:
    """The replicas of ``urls`` (``key``: where they were given, for the error), in order; two URLs
    naming one replica are a ConfigError."""
    out: list[Replica] = []
    for url in urls:
        root = to_root(url)
        name = replica_name(root)
        if any(r.name == name for r in out):
            raise ConfigError(key, url, f"names the replica {name} twice", "give each replica once")
        out.append(Replica(name, root))
    return tuple(out)


def client_replicas(scenario) -> tuple[Replica, ...]:
    """Spread by the client: ``scenario.hosts`` (two or more), else ()."""
    return replicas_from(scenario.hosts, "hosts (--host)") if len(scenario.hosts) > 1 else ()


def router_engines(scenario) -> tuple[Replica, ...]:
    """Behind a router: the engines of ``replicas.metrics`` (--replica-metrics), else ()."""
    return replicas_from(scenario.replicas.metrics, "replicas.metrics (--replica-metrics)", engine_root)


def check_layout(scenario) -> None:
    """The two layouts do not mix: hosts spread by the client are each their own metrics."""
    if len(scenario.hosts) > 1 and scenario.replicas.metrics:
        raise ConfigError("replicas.metrics (--replica-metrics)", list(scenario.replicas.metrics),
                          "is for engines behind one router (--host ROUTER), and --host was given "
                          f"{len(scenario.hosts)} times", "drop --replica-metrics: each --host replica is "
                          "read directly (its capacity and /metrics)")


def upstream_name(value: str | None, names: tuple[str, ...]) -> str:
    """The engine a router's response header names (``value``; nginx: ``addr`` or, after a retry,
    ``addr1, addr2``: the last served) -> its replica name, or ``UNATTRIBUTED`` (no header, or an
    engine not among ``names``; with no ``names`` given, the header's own value names it)."""
    if not value:
        return UNATTRIBUTED
    last = value.split(",")[-1].strip()
    return last if last in names or not names else UNATTRIBUTED


class Picker:
    """Where this process sends its next request, under a policy:

    - ``round_robin``: replica (n mod N) for the process's n-th request;
    - ``least_inflight``: the replica with the fewest of this process's requests in flight (ties:
      the next in round-robin order), so a slow replica, holding its requests longer, gets fewer.

    ``pick()`` counts the request in flight, ``done(i)`` when it ends. Each process picks on its
    own: with W workers, a replica's in-flight count is the sum of theirs."""

    def __init__(self, count: int, policy: str):
        if count < 1:
            raise ValueError("a Picker needs at least one replica")
        self.policy = policy
        self.inflight = [0] * count
        self._turn = itertools.cycle(range(count))

    def pick(self) -> int:
        first = next(self._turn)
        if self.policy == "least_inflight":
            n = len(self.inflight)
            first = min(((first + k) % n for k in range(n)), key=lambda i: self.inflight[i])
        self.inflight[first] += 1
        return first

    def done(self, index: int) -> None:
        self.inflight[index] -= 1


class Targets:
    """One process's replicas, resolved once from the scenario: ``spread`` (hosts the client spreads
    its requests over, with their ``Picker``), or ``engines`` behind a router (``upstream_header``
    then tells which served a request). ``names``: the replicas' names, in order. ``per_replica``:
    the requests are counted per replica (spread, or a router that names its engine)."""

    def __init__(self, scenario):
        check_layout(scenario)
        self.spread = client_replicas(scenario)
        self.engines = () if self.spread else router_engines(scenario)
        self.upstream_header = None if self.spread else scenario.replicas.upstream_header
        self.names = tuple(r.name for r in self.spread or self.engines)
        self.picker = Picker(len(self.spread), scenario.replicas.policy) if self.spread else None

    def use_engines(self, urls) -> None:
        """Behind a router that listed its backends (``loadgen.server.replicas.router_workers``):
        they are the engines, as if given by --replica-metrics."""
        self.engines = replicas_from(urls, "the router's list of workers", engine_root)
        self.names = tuple(r.name for r in self.engines)

    @property
    def per_replica(self) -> bool:
        return bool(self.spread) or self.upstream_header is not None

    @property
    def watched(self) -> tuple[Replica, ...]:
        """The replicas whose capacity and /metrics the run reads: the spread hosts or the engines."""
        return self.spread or self.engines

    def pick(self) -> tuple[int | None, str | None]:
        """(index, name) of the replica the next request goes to; (None, None) with one host."""
        if self.picker is None:
            return None, None
        index = self.picker.pick()
        return index, self.spread[index].name

    def done(self, index: int | None) -> None:
        if index is not None:
            self.picker.done(index)

    def root(self, index: int | None, host: str) -> str:
        """The URL a request picked ``index`` goes to (``host``: the one --host, index None)."""
        return host if index is None else self.spread[index].root

    def served_by(self, upstream: str | None) -> str | None:
        """Behind a router that names its engine: the replica of a response whose header said
        ``upstream``; None when requests are not counted that way."""
        return None if self.upstream_header is None else upstream_name(upstream, self.names)
