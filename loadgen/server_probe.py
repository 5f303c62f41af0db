"""Ask the server about its KV cache: capacity before the run, overload signals during it.

Parsing (``parse_metrics``, ``capacity_from_*``, ``watch_sample``) is pure and tested on fixture
texts. I/O is plain ``urllib`` GETs with short timeouts: inside locust gevent has monkey-patched
sockets, so they yield instead of blocking the loop. Nothing here raises for an odd or unreachable
server; it reports what it tried instead.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import gevent
from prometheus_client.parser import text_string_to_metric_families

from loadgen.guard import OverCapacityRule, StageWatch

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 16 * 1024 * 1024
# Labels that only name a replica of the same scheduler (SGLang --enable-metrics-for-all-schedulers
# reports the same pool from every TP rank): series differing only in these are one series.
REPLICA_LABELS = frozenset({"tp_rank", "attn_tp_rank"})
WATCH_METRICS = {
    "vllm": {
        "preemptions_total": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
        "waiting": ("vllm:num_requests_waiting",),
        "running": ("vllm:num_requests_running",),
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    },
    "sglang": {
        "preemptions_total": ("sglang:num_retracted_requests_total",),
        "waiting": ("sglang:num_queue_reqs",),
        "running": ("sglang:num_running_reqs",),
        "kv_usage": ("sglang:token_usage",),
    },
}

Samples = dict[str, list[tuple[dict[str, str], float]]]

# Tokens the server generated, read at the edges of each measurement window so a stage shows the
# server's own output tokens/s beside the client's (a large gap means one side is wrong).
GENERATION_COUNTERS = {
    "vllm": "vllm:generation_tokens_total",
    "sglang": "sglang:generation_tokens_total",
}


def server_root(base_url: str) -> str:
    """``http://h:p/v1/`` -> ``http://h:p``: the management endpoints live at the root."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


@dataclass(frozen=True)
class Reply:
    status: int | None  # None: no HTTP answer at all
    body: str
    error: str  # "" when status is 200
    refused: bool = False


def http_get(url: str, headers: dict | None, timeout_s: float) -> Reply:
    """GET ``url``; never raises. Environment proxies are ignored, like the load client does."""
    request = urllib.request.Request(
        url, headers={"Accept": "text/plain, application/json", **(headers or {})}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as resp:
            return Reply(resp.status, resp.read(MAX_BODY_BYTES).decode("utf-8", "replace"), "")
    except urllib.error.HTTPError as e:
        return Reply(e.code, "", f"HTTP {e.code}")
    except urllib.error.URLError as e:
        refused = isinstance(e.reason, ConnectionRefusedError)
        return Reply(None, "", f"cannot connect ({e.reason})", refused)
    except Exception as e:  # timeouts, resets, bad status lines: one failed source, not a crash
        return Reply(None, "", f"{type(e).__name__}: {e}".rstrip(": "))


def parse_metrics(text: str) -> Samples:
    """Prometheus text -> {sample name: [(labels, value), ...]}; colons in names are fine.

    prometheus_client's parser gives up at the first malformed line; then each line is parsed
    alone and bad ones are skipped, so one odd exporter line does not hide the rest.
    """
    try:
        families = list(text_string_to_metric_families(text))
    except Exception:
        families = []
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    families.extend(text_string_to_metric_families(line + "\n"))
                except Exception:
                    continue
    out: Samples = {}
    for family in families:
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _total(series: list[tuple[dict[str, str], float | None]]) -> float | None:
    """Sum over label sets, counting series that differ only in REPLICA_LABELS once (max)."""
    groups: dict[tuple, float] = {}
    for labels, value in series:
        if value is None or value != value:  # skip missing and NaN
            continue
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in REPLICA_LABELS))
        groups[key] = max(groups.get(key, value), value)
    return sum(groups.values()) if groups else None


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        value = int(float(labels[key]))  # "None" before profiling, or absent in old versions
    except (KeyError, ValueError):
        return None
    return value if value > 0 else None


def capacity_from_server_info(info: object) -> int | None:
    """SGLang ``/get_server_info``: ``max_total_num_tokens`` (top level, else per internal state)."""
    if not isinstance(info, dict):
        return None
    value = info.get("max_total_num_tokens")
    states = info.get("internal_states")
    if value is None and isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("max_total_num_tokens")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return int(value) if ok else None


def capacity_from_vllm_metrics(samples: Samples) -> int | None:
    """vLLM ``vllm:cache_config_info`` labels: kv_cache_size_tokens, else num_gpu_blocks x block_size.

    Summed over engines (data parallel: each engine has its own cache).
    """
    series = []
    for labels, _ in samples.get("vllm:cache_config_info", []):
        tokens = _int_label(labels, "kv_cache_size_tokens")
        if tokens is None:
            blocks, size = _int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size")
            tokens = blocks * size if blocks and size else None
        series.append((labels, tokens))
    total = _total(series)
    return int(total) if total else None


def capacity_from_sglang_metrics(samples: Samples) -> int | None:
    """SGLang gauge ``sglang:max_total_num_tokens``, summed over DP ranks."""
    total = _total(samples.get("sglang:max_total_num_tokens", []))
    return int(total) if total else None


def flavor_of(samples: Samples) -> str | None:
    names = samples.keys()
    for flavor in ("vllm", "sglang"):
        if any(n.startswith(flavor + ":") for n in names):
            return flavor
    return None


def watch_sample(samples: Samples, flavor: str | None) -> dict | None:
    """One poll's overload signals (StageWatch's input), or None if none of them is exposed.

    Counts are summed over label sets (engines, DP ranks); ``kv_usage`` (0-1) is the largest
    over label sets, because the fullest cache is the one that preempts first.
    """
    names = WATCH_METRICS.get(flavor or flavor_of(samples) or "")
    if names is None:
        return None
    sample: dict = {}
    for key, candidates in names.items():
        series = next((samples[n] for n in candidates if n in samples), None)
        if series is None:
            sample[key] = None
        elif key == "kv_usage":
            sample[key] = max((v for _, v in series if v == v), default=None)
        else:
            sample[key] = _total(series)
    return sample if any(v is not None for v in sample.values()) else None


@dataclass(frozen=True)
class Capacity:
    """The server's KV capacity in tokens (None: unknown, the guard is off) and where it came from."""

    tokens: int | None
    source: str | None  # scenario | sglang_server_info | vllm_cache_config | sglang_metrics
    flavor: str | None  # sglang | vllm
    max_model_len: int | None
    detail: str  # what was tried, for the startup message


def _json(reply: Reply) -> object:
    try:
        return json.loads(reply.body) if reply.status == 200 else None
    except ValueError:
        return None


def _models_info(models: object) -> tuple[int | None, str | None]:
    """``/v1/models`` -> (data[0].max_model_len, data[0].owned_by when it names a known server)."""
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    length = first.get("max_model_len")
    owner = first.get("owned_by")
    return (length if isinstance(length, int) else None), (owner if owner in WATCH_METRICS else None)


def discover_capacity(base_url: str, headers: dict | None = None, timeout_s: float = 5) -> Capacity:
    """Try, in order: SGLang /get_server_info, vLLM /metrics cache_config_info, SGLang /metrics gauge.

    A failing source falls through to the next; a refused connection ends the search at once.
    """
    root, tried = server_root(base_url), []

    def get(path: str) -> Reply:
        reply = http_get(root + path, headers, timeout_s)
        if reply.error:
            tried.append(f"GET {path}: {reply.error}")
        return reply

    def found(tokens: int, source: str, flavor: str, how: str) -> Capacity:
        tried.append(f"{tokens:,} tokens from {how}")
        return Capacity(tokens, source, flavor, max_model_len, "; ".join(tried))

    models = get("/v1/models")
    max_model_len, flavor = _models_info(_json(models))
    if models.refused:
        return Capacity(
            None, None, None, None, f"KV capacity unknown: server at {root} refused the connection"
        )
    tokens = capacity_from_server_info(_json(info := get("/get_server_info")))
    if tokens:
        return found(tokens, "sglang_server_info", "sglang", "GET /get_server_info max_total_num_tokens")
    if info.status == 200:
        tried.append("GET /get_server_info: no max_total_num_tokens")
    metrics = get("/metrics")
    samples = parse_metrics(metrics.body) if metrics.status == 200 else {}
    flavor = flavor or flavor_of(samples)
    if tokens := capacity_from_vllm_metrics(samples):
        return found(tokens, "vllm_cache_config", "vllm", "/metrics vllm:cache_config_info")
    if tokens := capacity_from_sglang_metrics(samples):
        return found(tokens, "sglang_metrics", "sglang", "/metrics sglang:max_total_num_tokens")
    if metrics.status == 200:
        tried.append("GET /metrics: no vllm:cache_config_info or sglang:max_total_num_tokens")
    return Capacity(None, None, flavor, max_model_len, "KV capacity unknown: " + "; ".join(tried))


def resolve_capacity(
    configured: int | None, base_url: str, headers: dict | None = None, timeout_s: float = 5
) -> Capacity:
    """The scenario's ``guard.kv_capacity_tokens`` wins when set; the server still gives flavor and
    max_model_len (and its own figure, quoted in ``detail`` when it differs)."""
    discovered = discover_capacity(base_url, headers, timeout_s)
    if configured is None:
        return discovered
    detail = f"{configured:,} tokens from scenario guard.kv_capacity_tokens"
    if discovered.tokens is not None and discovered.tokens != configured:
        detail += f" (server reports {discovered.tokens:,} via {discovered.source})"
    return Capacity(configured, "scenario", discovered.flavor, discovered.max_model_len, detail)


class ServerWatch:
    """A greenlet polling ``/metrics`` every ``interval_s`` into a StageWatch (see its rules).

    If the first poll finds no /metrics (error, or none of the watched names) the watch disables
    itself with one log line. Later failed polls are counted per stage and logged once.
    """

    def __init__(
        self,
        base_url: str,
        headers: dict | None,
        flavor: str | None,
        interval_s: float = 2.0,
        timeout_s: float = 2.0,
        rule: OverCapacityRule | None = None,
        clock=time.perf_counter,
    ):
        self.url = server_root(base_url) + "/metrics"
        self.headers, self.flavor, self.interval_s, self.timeout_s = headers, flavor, interval_s, timeout_s
        self.clock = clock
        self.stages = StageWatch(rule)
        self.disabled: str | None = None
        self._seen_ok = self._warned = False
        self._poll_errors = 0
        self._greenlet: gevent.Greenlet | None = None
        self._gen_start: tuple[float, float] | None = None  # (t, generation counter) at window open

    def start(self) -> ServerWatch:
        self._greenlet = gevent.spawn(self._run)
        return self

    def _run(self) -> None:
        while self.poll_once():
            gevent.sleep(self.interval_s)

    def poll_once(self) -> bool:
        """One poll; False once the watch has disabled itself."""
        reply = http_get(self.url, self.headers, self.timeout_s)
        samples = parse_metrics(reply.body) if reply.status == 200 else {}
        self.flavor = self.flavor or flavor_of(samples)
        sample = watch_sample(samples, self.flavor)
        if sample is not None:
            self._seen_ok = True
            self.stages.feed(self.clock(), sample)
        elif not self._seen_ok:
            self.disabled = reply.error or f"no {self.flavor or 'vLLM/SGLang'} queue or KV metrics in it"
            log.warning(
                "server watch off: GET %s: %s (no preemption/queue figures per stage)",
                self.url,
                self.disabled,
            )
            return False
        else:
            self._poll_errors += 1
            if not self._warned:
                self._warned = True
                log.warning(
                    "server watch: GET %s failed (%s); counting failed polls per stage",
                    self.url,
                    reply.error or "metrics missing",
                )
        return True

    def generation_tokens(self) -> tuple[float, float] | None:
        """(time, the server's generation-token counter) now, or None if it doesn't expose one."""
        name = GENERATION_COUNTERS.get(self.flavor or "")
        if name is None or not self._seen_ok:  # only once /metrics has answered (or never, if off)
            return None
        t = self.clock()
        reply = http_get(self.url, self.headers, self.timeout_s)
        series = parse_metrics(reply.body).get(name) if reply.status == 200 else None
        value = _total(series) if series else None
        return None if value is None else ((t + self.clock()) / 2, value)

    def begin_stage(self, index: int) -> None:
        self._poll_errors = 0
        self._gen_start = self.generation_tokens()
        self.stages.begin(index, self.clock())

    def end_stage(self, index: int) -> dict:
        """The stage's ``server`` object: StageWatch.end(...) + flavor, the counter behind
        ``preemptions``, failed polls, why the watch is off (None if on), and the server's own
        ``output_tokens`` / ``output_tokens_per_s`` over the window (generation-token counter
        read when the window opened and closed; None when the server has no such counter)."""
        gen_end, gen_start = self.generation_tokens(), self._gen_start
        out = self.stages.end(index, self.clock())
        if gen_start and gen_end and gen_end[1] >= gen_start[1] and gen_end[0] > gen_start[0]:
            tokens = gen_end[1] - gen_start[1]
            out.update(output_tokens=int(tokens), output_tokens_per_s=tokens / (gen_end[0] - gen_start[0]))
        else:
            out.update(output_tokens=None, output_tokens_per_s=None)
        counter = WATCH_METRICS.get(self.flavor or "", {}).get("preemptions_total", (None,))[0]
        out.update(
            flavor=self.flavor,
            preemption_metric=counter,
            poll_errors=self._poll_errors,
            disabled=self.disabled,
        )
        return out

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=self.timeout_s + 1)
            self._greenlet = None
