"""What the server says about itself: pure parsers of its answers, and the live /metrics watch.

Parsing (``parse_models``, ``parse_metrics``, ``capacity_from_*``, ``watch_sample``) is pure and
tested on fixture texts. The start check that asks for these answers is ``loadgen.server.start_check``;
``ServerWatch`` polls ``/metrics`` during the run. All requests go through ``StreamClient`` (the
one HTTP client; gevent-native, so a slow answer yields instead of blocking the loop). Nothing
here raises for an odd or unreachable server; it reports what it tried instead.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import gevent
from prometheus_client.parser import text_string_to_metric_families

from loadgen.errors import CONNECT_FAILED, READ_TIMEOUT, RequestError
from loadgen.run.kv_guard import OverCapacityRule, StageWatch
from loadgen.wire.client import StreamClient

log = logging.getLogger(__name__)
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

METRICS_PATH = "/metrics"
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


def failure_text(exc: RequestError) -> str:
    """A failed GET in a few words, never the body (a server may echo the API key in it)."""
    if exc.status is not None:
        return f"HTTP {exc.status}"
    if exc.kind == READ_TIMEOUT:
        return "timed out"
    if exc.kind == CONNECT_FAILED:
        return f"cannot connect ({exc.message})"
    return exc.message or exc.kind


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


@dataclass(frozen=True)
class ModelsInfo:
    """What ``GET /v1/models`` says about the first model it lists (None: not in the answer).

    ``max_model_len``: vLLM and SGLang; ``owned_by`` names the server (vllm, sglang, llamacpp);
    ``n_vocab`` / ``n_ctx``: llama.cpp's ``meta`` (vocabulary size, context per the whole server).
    """

    model: str | None
    max_model_len: int | None = None
    owned_by: str | None = None
    n_vocab: int | None = None
    n_ctx: int | None = None

    @property
    def flavor(self) -> str | None:
        """``owned_by`` when it names a server whose /metrics the watch knows (vllm, sglang)."""
        return self.owned_by if self.owned_by in WATCH_METRICS else None


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_models(answer: object) -> ModelsInfo:
    """``/v1/models`` JSON -> ModelsInfo of ``data[0]``; ``model`` None when no model is listed."""
    data = answer.get("data") if isinstance(answer, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    meta = first.get("meta") if isinstance(first.get("meta"), dict) else {}
    model, owner = first.get("id"), first.get("owned_by")
    return ModelsInfo(
        model=model if isinstance(model, str) and model else None,
        max_model_len=_positive_int(first.get("max_model_len")),
        owned_by=owner if isinstance(owner, str) else None,
        n_vocab=_positive_int(meta.get("n_vocab")),
        n_ctx=_positive_int(meta.get("n_ctx")),
    )


class ServerWatch:
    """A greenlet polling ``/metrics`` every ``interval_s`` into a StageWatch (see its rules).

    If the first poll finds no /metrics (error, or none of the watched names) the watch disables
    itself with one log line. Later failed polls are counted per stage and logged once.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        flavor: str | None,
        interval_s: float = 2.0,
        timeout_s: float = 2.0,
        rule: OverCapacityRule | None = None,
        clock=time.perf_counter,
    ):
        root = server_root(base_url)
        self.url = root + METRICS_PATH
        self.flavor, self.interval_s, self.timeout_s = flavor, interval_s, timeout_s

        def client() -> StreamClient:
            return StreamClient(root, api_key=api_key, connect_timeout_s=timeout_s, read_timeout_s=timeout_s)

        # one for the polling greenlet, one for the reads at the window's edges (never waiting on a poll)
        self._poll_client, self._edge_client = client(), client()
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
        text, error = self._get(self._poll_client)
        samples = parse_metrics(text) if error is None else {}
        self.flavor = self.flavor or flavor_of(samples)
        sample = watch_sample(samples, self.flavor)
        if sample is not None:
            self._seen_ok = True
            self.stages.feed(self.clock(), sample)
        elif not self._seen_ok:
            self.disabled = error or f"no {self.flavor or 'vLLM/SGLang'} queue or KV metrics in it"
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
                    error or "metrics missing",
                )
        return True

    @staticmethod
    def _get(client: StreamClient) -> tuple[str, str | None]:
        """(/metrics text, None), or ("", what failed)."""
        try:
            return client.get_text(METRICS_PATH), None
        except RequestError as exc:
            return "", failure_text(exc)

    def generation_tokens(self) -> tuple[float, float] | None:
        """(time, the server's generation-token counter) now, or None if it doesn't expose one."""
        name = GENERATION_COUNTERS.get(self.flavor or "")
        if name is None or not self._seen_ok:  # only once /metrics has answered (or never, if off)
            return None
        t = self.clock()
        text, error = self._get(self._edge_client)
        series = parse_metrics(text).get(name) if error is None else None
        value = _total(series) if series else None
        return None if value is None else ((t + self.clock()) / 2, value)

    def begin_stage(self, index: int, concurrency: int | None = None) -> None:
        self._poll_errors = 0
        self._gen_start = self.generation_tokens()
        self.stages.begin(index, self.clock(), concurrency)

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
        self._poll_client.close()
        self._edge_client.close()
