"""What the server says about itself, parsed: pure, no I/O, no clock.

``parse_models`` (``/v1/models``), ``parse_metrics`` (Prometheus text), ``capacity_from_*`` (the KV
capacity from each source), ``watch_sample`` (one poll's figures for the server watch),
``failure_text``; tested on fixture texts. The start check that asks for these answers is
``loadgen.server.start_check``; the server watch is ``loadgen.server.watch``. Nothing here raises
for an odd answer; it returns None for what it cannot read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from loadgen.errors import CONNECT_FAILED, READ_TIMEOUT, RequestError

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
    # llama.cpp (--metrics): a request that finds every slot busy is deferred (queued) until one frees;
    # it never preempts, and exports no KV use.
    "llamacpp": {
        "waiting": ("llamacpp:requests_deferred",),
        "running": ("llamacpp:requests_processing",),
    },
}

Samples = dict[str, list[tuple[dict[str, str], float]]]

# Tokens the server generated, read at the edges of each measurement window so a stage shows the
# server's own output tokens/s beside the client's (a large gap means one side is wrong).
WATCH_KEYS = ("preemptions_total", "waiting", "running", "kv_usage")

GENERATION_COUNTERS = {
    "vllm": "vllm:generation_tokens_total",
    "sglang": "sglang:generation_tokens_total",
    "llamacpp": "llamacpp:tokens_predicted_total",
}


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


def series_total(series: list[tuple[dict[str, str], float | None]]) -> float | None:
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
    total = series_total(series)
    return int(total) if total else None


def capacity_from_sglang_metrics(samples: Samples) -> int | None:
    """SGLang gauge ``sglang:max_total_num_tokens``, summed over DP ranks."""
    total = series_total(samples.get("sglang:max_total_num_tokens", []))
    return int(total) if total else None


@dataclass(frozen=True)
class Slots:
    """llama.cpp's ``GET /props``: ``total_slots`` requests run at once, each with up to
    ``per_slot`` tokens of context (``default_generation_settings.n_ctx``)."""

    total: int
    per_slot: int

    @property
    def tokens(self) -> int:
        """The KV cache as per-slot caches hold it: total x per_slot (``-c`` split over ``-np``).
        llama.cpp does not say when its slots share one unified cache (``--kv-unified``, its default
        when ``-np`` is not given); that cache holds ``per_slot`` tokens in all."""
        return self.total * self.per_slot


def slots_from_props(props: object) -> Slots | None:
    """``GET /props`` of llama.cpp's server -> Slots, or None when the answer is not that."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    total = _positive_int(props.get("total_slots"))
    per_slot = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return Slots(total, per_slot) if total and per_slot else None


def flavor_of(samples: Samples) -> str | None:
    names = samples.keys()
    for flavor in WATCH_METRICS:
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
    for key in WATCH_KEYS:  # every key, None where the flavor exports no such figure (llama.cpp: KV use)
        series = next((samples[n] for n in names.get(key, ()) if n in samples), None)
        if series is None:
            sample[key] = None
        elif key == "kv_usage":
            sample[key] = max((v for _, v in series if v == v), default=None)
        else:
            sample[key] = series_total(series)
    return sample if any(v is not None for v in sample.values()) else None


@dataclass(frozen=True)
class Capacity:
    """The server's KV capacity in tokens (None: unknown, the guard is off) and where it came from."""

    tokens: int | None
    source: str | None  # scenario | sglang_server_info | vllm_cache_config | sglang_metrics | llamacpp_props
    flavor: str | None  # sglang | vllm | llamacpp
    max_model_len: int | None
    detail: str  # what was tried, for the startup message
    slots: int | None = None  # requests the server runs at once, where it says (llama.cpp total_slots)


@dataclass(frozen=True)
class ModelsInfo:
    """What ``GET /v1/models`` says about the first model it lists (None: not in the answer).

    ``max_model_len``: vLLM and SGLang; ``owned_by`` names the server (vllm, sglang, llamacpp);
    ``n_vocab`` / ``n_ctx``: llama.cpp's ``meta`` (vocabulary size, context per the whole server);
    ``ids``: every model id the answer lists, in its order (base models and LoRA adapters alike).
    """

    model: str | None
    max_model_len: int | None = None
    owned_by: str | None = None
    n_vocab: int | None = None
    n_ctx: int | None = None
    ids: tuple[str, ...] = ()

    @property
    def flavor(self) -> str | None:
        """``owned_by`` when it names a server whose /metrics the watch knows (vllm, sglang, llamacpp)."""
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
        ids=tuple(card["id"] for card in data if isinstance(card, dict) and isinstance(card.get("id"), str)
                  and card["id"]) if isinstance(data, list) else (),
    )


def unserved_models(names: tuple[str, ...], info: ModelsInfo) -> str | None:
    """The start check's line when a model of a mix is not among the ids ``GET /v1/models`` lists
    (naming each and what the server serves), else None."""
    missing = [name for name in names if name not in info.ids]
    if not missing:
        return None
    which = ", ".join(repr(name) for name in missing)
    return (f"the server does not serve the model{'s' if len(missing) > 1 else ''} {which} of the mix "
            f"(GET /v1/models lists {', '.join(repr(i) for i in info.ids) or 'no model'}); "
            "name models as the server lists them in --model or model:")
