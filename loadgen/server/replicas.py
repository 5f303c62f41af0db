"""The start check of several replicas (docs/replicas.md): each one's models and KV capacity, and
the fleet's capacity, their sum.

Hosts spread by the client (``--host`` repeated): the first gets the whole start check
(``start_check.preflight``: models, capacity, the probe request); every one gets ``GET /v1/models``
(it must answer and list the run's model) and its own capacity search
(``start_check.models_and_capacity``). Engines behind a router (``--replica-metrics``): the router
gets the whole start check, each engine the same capacity search (its ``/v1/models`` only informs).

A router that lists its backends (vLLM's and SGLang's routers: ``ROUTER_WORKERS_PATHS``) needs no
``--replica-metrics``: ``router_workers`` finds them.

The fleet's capacity is the sum of the replicas' (``summed_capacity``), known only when every
replica's is: a guard on part of the fleet would let the unknown replicas overflow unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen import errors
from loadgen.errors import RequestError
from loadgen.server.replies import Capacity
from loadgen.server.start_check import PROBE_TIMEOUT_S, StartRefused, models_and_capacity
from loadgen.wire.client import StreamClient
from loadgen.wire.endpoints import server_root

# Where LLM routers list their backends, asked in this order: GET /workers, {"workers": [{"url": ...}]}
# (sglang-router 0.3, vllm-router 0.1); GET /list_workers, {"urls": [...]} (vllm-router, older sglang-router)
ROUTER_WORKERS_PATHS = ("/workers", "/list_workers")


@dataclass(frozen=True)
class ReplicaCapacity:
    """One replica's name and what its capacity search found."""

    name: str
    capacity: Capacity


def summed_capacity(replicas: tuple[ReplicaCapacity, ...], configured: int | None = None) -> Capacity:
    """The fleet's Capacity: tokens = sum of the replicas' tokens (None when one is unknown, unless
    ``configured``, the scenario's ``guard.kv_capacity_tokens``, which is then the fleet's and
    wins); flavor: the replicas' when they agree; max_model_len: the smallest (a request must fit
    wherever it lands); detail: each replica's figure."""
    caps = [r.capacity for r in replicas]
    known = [c.tokens for c in caps]
    parts = [f"{r.name} {r.capacity.tokens:,}" if r.capacity.tokens is not None else f"{r.name} unknown"
             for r in replicas]
    flavors = {c.flavor for c in caps if c.flavor}
    lens = [c.max_model_len for c in caps if c.max_model_len]
    flavor, max_len = (flavors.pop() if len(flavors) == 1 else None), (min(lens) if lens else None)
    slots = sum(c.slots for c in caps) if caps and all(c.slots for c in caps) else None
    if configured is not None:
        return Capacity(configured, "scenario", flavor, max_len,
                        f"{configured:,} tokens from scenario guard.kv_capacity_tokens (replicas: {', '.join(parts)})",
                        slots)
    if None in known or not known:
        missing = ", ".join(r.name for r in replicas if r.capacity.tokens is None)
        return Capacity(None, None, flavor, max_len, f"KV capacity unknown: no figure from {missing} "
                        f"({'; '.join(r.capacity.detail for r in replicas if r.capacity.tokens is None)})", slots)
    total = sum(known)
    return Capacity(total, "replicas", flavor, max_len, f"{total:,} tokens = {' + '.join(parts)}", slots)


def check_replicas(replicas, scenario, api_key: str | None, model: str | None, say: Callable[[str], None],
                   *, spread: bool) -> tuple[ReplicaCapacity, ...]:
    """Each replica's capacity search (``replicas``: ``loadgen.wire.replicas.Replica``s). With
    ``spread`` (the client sends to each): a replica that does not answer ``GET /v1/models`` or
    does not list ``model`` stops the run (StartRefused naming it). Says one line per replica."""
    req, found = scenario.request, []
    for replica in replicas:
        models, capacity = models_and_capacity(replica.root, api_key=api_key, headers=req.headers,
                                               models_timeouts_s=(req.connect_timeout_s, req.read_timeout_s))
        if spread and models.error is not None:
            raise StartRefused(errors.EXIT_SERVER_UNUSABLE, f"replica {replica.name} ({replica.root}) failed the "
                               f"start check: GET /v1/models: {models.error.message or models.error}; check "
                               "every --host")
        if spread and model is not None and models.info is not None and model not in models.info.ids:
            raise StartRefused(errors.EXIT_CONFIG, f"config error: replica {replica.name} does not serve the model "
                               f"{model!r} (GET /v1/models lists {', '.join(map(repr, models.info.ids))}); "
                               "every --host must serve the run's model")
        figure = f"{capacity.tokens:,} tokens ({capacity.source})" if capacity.tokens is not None else "unknown"
        say(f"llm-loadgen: replica {replica.name}: KV capacity {figure}")
        found.append(ReplicaCapacity(replica.name, capacity))
    return tuple(found)


def workers_listed(answer: object) -> tuple[str, ...]:
    """The backends' URLs of a router's answer: ``{"workers": [{"url": ...}, ...]}`` or
    ``{"urls": [...]}``; () for anything else."""
    if not isinstance(answer, dict):
        return ()
    listed = answer.get("urls")
    if not isinstance(listed, list):
        workers = answer.get("workers")
        listed = [w.get("url") for w in workers if isinstance(w, dict)] if isinstance(workers, list) else []
    return tuple(u for u in listed if isinstance(u, str) and u.startswith(("http://", "https://")))


def router_workers(host: str, api_key: str | None, headers) -> tuple[str, tuple[str, ...]]:
    """(the path that answered, the engines a router at ``host`` lists), trying
    ``ROUTER_WORKERS_PATHS`` in order; ("", ()) when none lists any (an nginx, a server that is not
    a router). Never raises."""
    client = StreamClient(server_root(host), api_key=api_key, headers=headers, connect_timeout_s=PROBE_TIMEOUT_S,
                          read_timeout_s=PROBE_TIMEOUT_S)
    try:
        for path in ROUTER_WORKERS_PATHS:
            try:
                if urls := workers_listed(client.get_json(path)):
                    return path, urls
            except RequestError:
                continue
        return "", ()
    finally:
        client.close()
