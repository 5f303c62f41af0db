"""Scenario schema: the built-in defaults, the frozen dataclasses, and the typed fields.

Pure: no I/O, no clock. ``loadgen.config`` reads files and options and calls
``loadgen.config.build.build_scenario``; other modules import the types from ``loadgen.config``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from loadgen.slo.objectives import Objectives
from loadgen.stats.cost import CostConfig
from loadgen.stats.drift import DriftConfig
from loadgen.workload.model_mix import ModelMix

# The scenario's ``endpoint`` names the API; its streaming path (loadgen.wire.endpoints.PATHS) is
# declared here so that a path given where a name belongs can be recognised in the config layer.
ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ENDPOINTS = tuple(ENDPOINT_PATHS)
ARRIVALS = ("poisson", "constant", "gamma")  # loadgen.workload.arrivals.ARRIVALS (a test keeps them equal)
GUARD_ACTIONS = ("abort", "clamp", "warn")
REPLICA_POLICIES = ("round_robin", "least_inflight")  # how the client spreads requests over hosts (docs/replicas.md)
LENGTH_DISTS = ("fixed", "uniform", "normal", "lognormal")  # loadgen.workload.lengths.KINDS (a test keeps them equal)
DATASET_ORDERS = ("in-order", "shuffled")
COMPAT_SETTINGS = ("auto", "vllm", "sglang", "llamacpp", "openai", "openai-strict")  # loadgen.wire.compat

# The seeds' scenario. config/default.yaml must equal this dict (a test pins it); it lives here too
# so an installed package works without the repository checkout.
DEFAULTS: dict[str, Any] = {
    "name": "default",
    "endpoint": "completions",
    "model": None,
    "api_key_env": "OPENAI_API_KEY",
    "input_tokens": 1000,
    "output_tokens": 1000,
    # Length distributions (loadgen.workload.lengths): dist fixed uses input_tokens / output_tokens.
    "input": {"dist": "fixed", "mean": None, "std": None, "min": 1, "max": None},
    "output": {"dist": "fixed", "mean": None, "std": None, "min": 1, "max": None},
    "workload": {"dataset": None, "dataset_order": "in-order", "trace_speedup": 1.0, "turns": 1},
    "prompt": {
        "seed": 0,
        "token_id_range": [1000, 30000],
        "shared_prefix_tokens": 0,
    },
    "request": {
        "continuous_usage": True,
        "connect_timeout_s": 10,
        "read_timeout_s": 120,
        "extra_body": {},
        "headers": {},
        "compat": "auto",
        "client_error_pause_s": 1.0,
        "ca_cert": None,
        "verify_tls": True,
        "thinking": None,
    },
    "stages": {
        "list": None,
        "start": 1,
        "factor": 2,
        "max": 1024,
        "ramp_s": 5,
        "warmup_s": 30,
        "turnover": True,
        "max_warmup_s": 600,
        "duration_s": 60,
        "min_requests": 0,
        "max_window_s": 900,
        "drain_s": 300,
        "slice_s": None,
    },
    "rate": {
        "list": None,
        "start": None,
        "factor": 2,
        "max": None,
        "arrival": "poisson",
        "burstiness": 1.0,
        "seed": 0,
        "max_inflight": 1024,
        "probe_requests": 2,
    },
    "guard": {
        "kv_capacity_tokens": None,
        "margin": 0.0,
        "action": "abort",
        "require": False,
        "watch": True,
        "watch_interval_s": 2,
        "abort_on_over_capacity": False,
        "over_capacity_queue_fraction": 0.1,
        "over_capacity_queue_share": 0.5,
        "over_capacity_kv_usage": 0.98,
    },
    "knee": {"threshold": 0.10},
    "drift": {
        "throughput_pct_per_h": 10.0,
        "ttft_p99_pct_per_h": 20.0,
        "itl_p99_pct_per_h": 20.0,
        "itl_p50_pct_per_h": 20.0,
        "error_rate_per_h": 0.01,
        "kv_usage_per_h": 0.05,
        "preemptions_per_min_per_h": 1.0,
        "alpha": 0.01,
        "min_slices": 10,
    },
    "slo": {
        "ttft_s": None,
        "tpot_s": None,
        "e2e_s": None,
        "itl_max_s": None,
        "attainment": 0.99,
        "search": False,
        "resolution": 0.1,
        "max_search_stages": 4,
        "early_stop": False,
        "confidence": 0.95,
        "preset": None,
    },
    "cost": {"gpus": None, "gpu_hour_usd": None},
    "exporter": {"port": 0, "host": "127.0.0.1"},
    "client_check": {"cpu_percent_max": 90, "loop_lag_p99_s_max": 0.02, "lateness_p99_s_max": 0.005},
    "gpu_metrics": [],
    # Several replicas (docs/replicas.md): hosts spread by the client, or engines behind a router
    "hosts": [],
    "replicas": {"policy": "round_robin", "metrics": [], "upstream_header": None, "share_ratio_max": 1.5,
                 "slow_ratio": 2.0},
    "results_dir": "results",
    "requests_jsonl": False,
    "plots": True,
}


def default_document() -> dict[str, Any]:
    """A fresh deep copy of DEFAULTS (callers may change it freely)."""
    return copy.deepcopy(DEFAULTS)


class FrozenDict(dict):
    """A dict that refuses changes. ``request.extra_body`` is shared by every request of a run, so
    a user class that mutated it would change all later requests. Copy it with ``dict(...)``.
    Nested values (lists, dicts) are copies taken at load time but are not themselves frozen."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("scenario values are read-only; copy first: body = dict(extra_body)")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __reduce__(self):  # copy/deepcopy/pickle rebuild from a plain dict, not item by item
        return (FrozenDict, (dict(self),))


@dataclass(frozen=True)
class LengthConfig:
    """How many tokens each request asks for (``input:`` / ``output:``; loadgen.workload.lengths.LengthDist).
    ``dist: fixed`` (the default) is always input_tokens / output_tokens."""

    dist: str  # one of LENGTH_DISTS
    mean: float | None  # normal, lognormal
    std: float | None
    min: int
    max: int | None  # uniform: required; normal/lognormal: optional upper clamp


@dataclass(frozen=True)
class WorkloadConfig:
    """Where requests come from besides the length distributions (loadgen.workload.asks)."""

    dataset: str | None  # a JSONL/CSV file of requests (loadgen.workload.dataset); None: synthetic
    dataset_order: str  # one of DATASET_ORDERS
    trace_speedup: float  # a dataset with timestamps replays at this many times its speed
    turns: int  # > 1: each user holds conversations of this many turns


@dataclass(frozen=True)
class PromptConfig:
    seed: int
    token_id_range: tuple[int, int]  # token ids drawn uniformly in [lo, hi)
    shared_prefix_tokens: int  # leading tokens shared by all requests; < input_tokens


@dataclass(frozen=True)
class RequestConfig:
    continuous_usage: bool  # ask for per-chunk usage (stream_options.continuous_usage_stats)
    connect_timeout_s: float
    read_timeout_s: float  # no bytes for this long -> read_timeout failure
    extra_body: FrozenDict  # merged into every request body; read-only
    headers: FrozenDict  # {name: value} sent on every request to the server (loadgen.config.headers)
    compat: str  # one of COMPAT_SETTINGS: auto probes the server and adapts (loadgen.wire.compat)
    client_error_pause_s: float  # a user pauses this long after a 4xx refusal mid-run
    ca_cert: str | None  # a PEM file trusted instead of the system store (loadgen.wire.tls)
    verify_tls: bool  # false: no certificate or host-name check (--insecure)
    # chat: chat_template_kwargs.enable_thinking (Qwen3-style templates on vLLM and SGLang); None: not sent
    thinking: bool | None = None


@dataclass(frozen=True)
class StagesConfig:
    # The field is called ``list`` (the YAML key). Annotations below avoid the builtin name.
    list: tuple[int, ...] | None
    start: int
    factor: float
    max: int
    ramp_s: float
    warmup_s: float
    turnover: bool
    max_warmup_s: float
    duration_s: float
    min_requests: int
    max_window_s: float
    drain_s: float
    slice_s: float | None = None  # soak: every window is also cut into slices this long (docs/soak.md)

    def concurrencies(self) -> tuple[int, ...]:
        """Concurrency of each stage, in order.

        With ``list`` set: exactly that list. Otherwise c_k = round(start * factor**k) for k = 0, 1,
        ... while c_k <= max (round half up; a value equal to the previous one is skipped, which
        only happens for factors below 2), then ``max`` itself is appended if the series skipped
        it: the user named max as the concurrency to reach. start 1, factor 3, max 10 gives
        1, 3, 9, 10 — note the last step can be much smaller than ``factor``.
        """
        if self.list is not None:
            return tuple(self.list)
        out: list[int] = []
        k = 0
        while True:
            c = math.floor(self.start * self.factor**k + 0.5)
            if c > self.max:
                break
            if not out or c > out[-1]:
                out.append(c)
            k += 1
        if out[-1] != self.max:
            out.append(self.max)
        return tuple(out)


@dataclass(frozen=True)
class RateConfig:
    """Open-loop (rate) mode: on when ``list`` or ``start`` is set (loadgen.locust_face.open_loop)."""

    list: tuple[float, ...] | None  # requests/s per stage
    start: float | None  # geometric form: start, start x factor, ... up to max
    factor: float
    max: float | None
    arrival: str  # one of ARRIVALS
    burstiness: float  # gamma shape: 1 = Poisson, < 1 burstier
    seed: int
    max_inflight: int  # per load-generating process; a due request beyond it is dropped_by_client
    probe_requests: int  # sequential requests before the first stage, for the KV guard's E2E

    def rates(self) -> tuple[float, ...] | None:
        """Offered rate of each stage (requests/s), or None in the concurrency sweep.

        ``list`` as given; else start x factor^k for k = 0, 1, ... while <= max (``max`` appended
        if the series skipped it, as for concurrencies)."""
        if self.list is not None:
            return tuple(self.list)
        if self.start is None:
            return None
        out, k = [], 0
        while (r := round(self.start * self.factor**k, 9)) <= self.max * (1 + 1e-9):
            out.append(r)
            k += 1
        if out[-1] < self.max * (1 - 1e-9):
            out.append(float(self.max))
        return tuple(out)


@dataclass(frozen=True)
class GuardConfig:
    kv_capacity_tokens: int | None  # None: discover from the server
    margin: float  # projected tokens *= (1 + margin)
    action: str  # one of GUARD_ACTIONS
    require: bool  # True: no known capacity is an error
    watch: bool  # poll the server's /metrics during stages
    watch_interval_s: float
    abort_on_over_capacity: bool
    over_capacity_queue_fraction: float  # a queue >= this x concurrency ...
    over_capacity_queue_share: float  # ... in at least this share of the polls: over capacity
    over_capacity_kv_usage: float  # KV use >= this in that share of the polls: over capacity


@dataclass(frozen=True)
class ReplicasConfig:
    """Several replicas of one server (docs/replicas.md; ``Scenario.hosts`` lists them when the
    client spreads the load itself)."""

    policy: str  # one of REPLICA_POLICIES: the replica each request goes to (loadgen.wire.replicas)
    metrics: tuple[str, ...]  # behind a router: each engine's root, /metrics or /get_server_info URL
    upstream_header: str | None  # behind a router: the response header naming the engine (nginx $upstream_addr)
    share_ratio_max: float  # a replica's request share / its fair share above this (or below 1/this): flagged
    slow_ratio: float  # a replica's TTFT or TPOT p50 above this x the other replicas' median: flagged slow


@dataclass(frozen=True)
class KneeConfig:
    threshold: float  # doubling concurrency adds < threshold (relative) throughput -> knee


@dataclass(frozen=True)
class ExporterConfig:
    port: int  # 0 = off
    host: str


@dataclass(frozen=True)
class ClientCheckConfig:
    cpu_percent_max: float
    loop_lag_p99_s_max: float
    lateness_p99_s_max: float  # open loop: send lateness p99 at or above this -> client_bound


@dataclass(frozen=True)
class Scenario:
    """A validated scenario. Build it with ``loadgen.config.load_scenario``, never directly."""

    name: str
    endpoint: str  # one of ENDPOINTS
    model: str | None  # None: the client uses the first id from GET /v1/models
    api_key_env: str | None  # NAME of the env var holding the key; None: no Authorization header
    input_tokens: int
    output_tokens: int
    input: LengthConfig
    output: LengthConfig
    workload: WorkloadConfig
    prompt: PromptConfig
    request: RequestConfig
    stages: StagesConfig
    rate: RateConfig
    guard: GuardConfig
    knee: KneeConfig
    drift: DriftConfig  # loadgen.stats.drift: what counts as drift per hour over a soak's time slices
    slo: Objectives  # loadgen.slo.objectives: per-request objectives; none set = no SLO accounting
    cost: CostConfig  # loadgen.stats.cost: GPUs and their price, for tokens/s per GPU and $ per million tokens
    exporter: ExporterConfig
    client_check: ClientCheckConfig
    gpu_metrics: tuple[str, ...]  # DCGM exporters' /metrics URLs, one per node (loadgen.server.gpu_watch)
    hosts: tuple[str, ...]  # replicas the client spreads the load over (--host repeated); () = --host alone
    replicas: ReplicasConfig
    results_dir: str
    requests_jsonl: bool  # one JSON line per request in the run folder (loadgen.stats.request_line)
    plots: bool  # the PNG plots drawn when the run ends (false: none; `report build` draws them later)
    # a mix of models (loadgen.workload.model_mix.ModelMix): each request draws its model by weight;
    # ``model`` is then the mix's first name (the start check's probe). None: every request sends ``model``.
    # Not a key of its own: the scenario's ``model`` key holds the mix (``part_of``).
    model_mix: ModelMix | None = field(default=None, metadata={"part_of": "model"})

    def concurrencies(self) -> list[int]:
        """Concurrency of each stage; see ``StagesConfig.concurrencies`` for the rule."""
        return list(self.stages.concurrencies())

    @property
    def open_loop(self) -> bool:
        """Rate stages (requests arrive on a schedule) instead of concurrency stages."""
        return self.rate.rates() is not None

    def length_dist(self, which: str):
        """The ``input`` or ``output`` loadgen.workload.lengths.LengthDist (fixed: input/output_tokens)."""
        from loadgen.workload.lengths import LengthDist

        c: LengthConfig = getattr(self, which)
        value = self.input_tokens if which == "input" else self.output_tokens
        return LengthDist(c.dist, value if c.dist == "fixed" else None, c.mean, c.std, c.min, c.max)

    def expected_lengths(self) -> tuple[int, int] | tuple[str, str]:
        """(input, output) tokens every request is sent with, for the token-mismatch warning; words
        when requests vary (a dataset, several turns, a length distribution)."""
        varied = self.workload.dataset or self.workload.turns > 1 or self.input.dist != "fixed" \
            or self.output.dist != "fixed"
        return ("each request's expected",) * 2 if varied else (self.input_tokens, self.output_tokens)

    def loads(self) -> list[float]:
        """Each stage's load: requests/s in open-loop mode, else the concurrency."""
        rates = self.rate.rates()
        return list(rates) if rates is not None else self.concurrencies()

    def to_dict(self) -> dict[str, Any]:
        """The resolved scenario as plain JSON-safe data, with the same keys as the YAML file, so
        ``build_scenario(s.to_dict()) == s``. Holds no secret: only the env var's NAME, and
        ``request.headers`` with a credential's value replaced by ``<hidden>``, and the GPU exporters'
        URLs without a password (``loadgen.config.headers.shown``, ``url_shown``; the places the round
        trip does not hold)."""
        from loadgen.config.headers import shown, url_shown

        out = _plain(self)
        out["request"]["headers"] = shown(self.request.headers)
        out["gpu_metrics"] = [url_shown(u) for u in self.gpu_metrics]
        mix = out.pop("model_mix")
        if mix is not None:
            out["model"] = self.model_mix.to_mapping()
        return out


def _plain(obj: Any) -> Any:
    if is_dataclass(obj):  # a field marked ``flatten`` is keys of its section (e.g. slo.ttft_p99_s), given
        # by the method the mark names
        out = {}
        for f in fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("flatten"):
                out.update(getattr(obj, f.metadata["flatten"])())
            else:
                out[f.name] = _plain(value)
        return out
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# Section name -> dataclass, in YAML order; every other top-level key is a scalar field.
SECTIONS: dict[str, type] = {
    "input": LengthConfig,
    "output": LengthConfig,
    "workload": WorkloadConfig,
    "prompt": PromptConfig,
    "request": RequestConfig,
    "stages": StagesConfig,
    "rate": RateConfig,
    "guard": GuardConfig,
    "replicas": ReplicasConfig,
    "knee": KneeConfig,
    "drift": DriftConfig,
    "slo": Objectives,
    "cost": CostConfig,
    "exporter": ExporterConfig,
    "client_check": ClientCheckConfig,
}
