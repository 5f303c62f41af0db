"""A raw scenario document (parsed YAML, dotted overrides) -> validated, frozen Scenario. Pure.

Order: unknown keys are reported first (with a "did you mean"), then the file is laid over the
built-in defaults, overrides are applied (they win), every field is checked in SPEC order, and
finally the rules that relate two fields. The first problem found is raised as a ConfigError.
"""

from __future__ import annotations

import difflib
import math
import reprlib
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from loadgen.config.fields import (
    Check,
    Shown,
    api_name,
    body_mapping,
    boolean,
    choice,
    env_var_name,
    integer,
    number,
    rate_list,
    stage_list,
    text,
    token_id_range,
    url_list,
)
from loadgen.config.headers import header_mapping
from loadgen.config.schema import (
    ARRIVALS,
    COMPAT_SETTINGS,
    DATASET_ORDERS,
    ENDPOINT_PATHS,
    GUARD_ACTIONS,
    LENGTH_DISTS,
    REPLICA_POLICIES,
    SECTIONS,
    FrozenDict,
    Scenario,
    default_document,
)
from loadgen.errors import ConfigError
from loadgen.slo.limits import collect_limits, limit_set_name, looks_like_limit_key, parse_limit_key
from loadgen.slo.objectives import OBJECTIVES
from loadgen.workload.model_mix import ModelMix, parse_model

# A sweep longer than this is a factor typo (e.g. 1.001), not a plan.
MAX_SWEEP_STAGES = 200

# Every leaf of the scenario, by dotted key, with its checker. Its keys equal DEFAULTS' leaves.
SPEC: dict[str, Check] = {
    "name": text("a short label for the scenario, e.g. fp8-kv (the run name adds endpoint, tokens, stages)", forbid="/\\"),
    "endpoint": api_name(ENDPOINT_PATHS),
    "model": parse_model,  # a name, null (the first id from GET /v1/models), or a mix (loadgen.workload.model_mix)
    "api_key_env": env_var_name,
    "input_tokens": integer("prompt length in tokens, e.g. 1000", ge=1),
    "output_tokens": integer("tokens generated per request, e.g. 1000", ge=1),
    "input.dist": choice(LENGTH_DISTS, "fixed uses input_tokens; uniform needs min/max; normal and lognormal mean/std"),
    "input.mean": number("tokens, e.g. 1000", gt=0, nullable=True),
    "input.std": number("tokens, e.g. 300", ge=0, nullable=True),
    "input.min": integer("the shortest prompt in tokens, e.g. 1", ge=1),
    "input.max": integer("the longest prompt in tokens, e.g. 4000; null: no clamp", ge=1, nullable=True),
    "output.dist": choice(LENGTH_DISTS, "fixed uses output_tokens; uniform needs min/max; normal and lognormal mean/std"),
    "output.mean": number("tokens, e.g. 300", gt=0, nullable=True),
    "output.std": number("tokens, e.g. 100", ge=0, nullable=True),
    "output.min": integer("the shortest output in tokens, e.g. 1", ge=1),
    "output.max": integer("the longest output in tokens, e.g. 2000; null: no clamp", ge=1, nullable=True),
    "workload.dataset": text("a JSONL or CSV file of requests, or null for synthetic prompts", nullable=True),
    "workload.dataset_order": choice(DATASET_ORDERS, "in-order, or shuffled (seeded by prompt.seed)"),
    "workload.trace_speedup": number("e.g. 2 to replay a trace twice as fast", gt=0),
    "workload.turns": integer("turns per conversation, e.g. 4; 1 for single requests", ge=1, le=1000),
    "prompt.seed": integer("any whole number >= 0, e.g. 0", ge=0),
    "prompt.token_id_range": token_id_range,
    "prompt.shared_prefix_tokens": integer("0 for no shared prefix", ge=0),
    "request.continuous_usage": boolean(),
    "request.connect_timeout_s": number("seconds, e.g. 10", gt=0),
    "request.read_timeout_s": number("seconds without a byte before a request fails, e.g. 120", gt=0),
    "request.extra_body": body_mapping,
    "request.headers": lambda key, value: FrozenDict(header_mapping(key, value)),
    "request.compat": choice(COMPAT_SETTINGS, "auto probes the server; openai-strict sends standard fields only"),
    "request.client_error_pause_s": number("seconds, e.g. 1; 0 for no pause", ge=0),
    "request.ca_cert": text("a PEM file with the server's CA certificate, or null for the system store",
                            nullable=True),
    "request.verify_tls": boolean(),
    "request.thinking": boolean("true or false turns a reasoning model's thinking on or off (chat); null "
                                "sends nothing (the server's default)", nullable=True),
    "stages.list": stage_list,
    "stages.start": integer("the first stage's concurrency, e.g. 1", ge=1),
    "stages.factor": number("use 2 to double concurrency each stage", gt=1),
    "stages.max": integer("the last stage's concurrency, e.g. 1024", ge=1),
    "stages.ramp_s": number("seconds to start a stage's users, e.g. 5; 0 for all at once", ge=0),
    "stages.warmup_s": number("seconds excluded from statistics, e.g. 30; 0 for none", ge=0),
    "stages.turnover": boolean(),
    "stages.max_warmup_s": number("seconds, e.g. 600", gt=0),
    "stages.duration_s": number("seconds measured per stage, e.g. 60", gt=0),
    "stages.min_requests": integer("requests per window, e.g. 100; 0 turns it off", ge=0),
    "stages.max_window_s": number("seconds, e.g. 900", gt=0),
    "stages.drain_s": number("seconds to wait for in-flight requests, e.g. 300; 0 to not wait", ge=0),
    "stages.slice_s": number("seconds per time slice of a window, e.g. 60; null for none", gt=0, nullable=True),
    "rate.list": rate_list,
    "rate.start": number("the first stage's rate in requests/s, e.g. 1; null for rate.list or "
                         "the concurrency sweep", gt=0, nullable=True),
    "rate.factor": number("use 2 to double the rate each stage", gt=1),
    "rate.max": number("the last stage's rate in requests/s, e.g. 64", gt=0, nullable=True),
    "rate.arrival": choice(ARRIVALS, "poisson (default), constant, or gamma with rate.burstiness"),
    "rate.burstiness": number("the gamma shape: 1 = Poisson, < 1 burstier, e.g. 0.5", gt=0),
    "rate.seed": integer("any whole number >= 0, e.g. 0", ge=0),
    "rate.max_inflight": integer("requests in flight per load process, e.g. 1024", ge=1),
    "rate.probe_requests": integer("sequential requests timed before the first rate stage for the "
                                   "KV guard, e.g. 2; 0 for none", ge=0),
    "guard.kv_capacity_tokens": integer(
        "the KV cache size in tokens, or null to discover it from the server", ge=1, nullable=True
    ),
    "guard.margin": number("e.g. 0.1 for 10% headroom; 0 for none", ge=0),
    "guard.action": choice(
        GUARD_ACTIONS, "abort stops before an over-capacity stage, clamp lowers it, warn only logs"
    ),
    "guard.require": boolean(),
    "guard.watch": boolean(),
    "guard.watch_interval_s": number("seconds between /metrics polls, e.g. 2", gt=0),
    "guard.abort_on_over_capacity": boolean(),
    "guard.over_capacity_queue_fraction": number("a share of the stage's concurrency, e.g. 0.1", gt=0),
    "guard.over_capacity_queue_share": number("a share of the window's polls, e.g. 0.5", gt=0, le=1),
    "guard.over_capacity_kv_usage": number("a KV cache use 0-1, e.g. 0.98", gt=0, le=1),
    "knee.threshold": number("e.g. 0.1: doubling concurrency adds < 10% throughput", gt=0, lt=1),
    **{f"drift.{k}": number("a change per hour, e.g. 10 (percent) or 0.05 (absolute)", gt=0) for k in (
        "throughput_pct_per_h", "ttft_p99_pct_per_h", "itl_p99_pct_per_h", "itl_p50_pct_per_h", "error_rate_per_h", "kv_usage_per_h",
        "preemptions_per_min_per_h")},
    "drift.alpha": number("the trend test's level, e.g. 0.01", gt=0, lt=0.5),
    "drift.min_slices": integer("slices a drift verdict needs, e.g. 10", ge=3),
    "slo.ttft_s": number("seconds, e.g. 2 (1 ms at least), or null for no TTFT objective", ge=0.001,
                         nullable=True),
    "slo.tpot_s": number("seconds per output token, e.g. 0.05, or null", gt=0, nullable=True),
    "slo.e2e_s": number("seconds, e.g. 60, or null", gt=0, nullable=True),
    "slo.itl_max_s": number("seconds of the worst gap inside a request, e.g. 0.5, or null", gt=0,
                            nullable=True),
    "slo.attainment": number("the share of requests that must meet every objective, e.g. 0.99", gt=0,
                             le=1),
    "slo.search": boolean(),
    "slo.resolution": number("a share of the last passing concurrency, e.g. 0.1", gt=0, le=1),
    "slo.max_search_stages": integer("search stages at most, e.g. 4", ge=1, le=20),
    "slo.early_stop": boolean(),
    "slo.confidence": number("the early stop's confidence, e.g. 0.95 (a wrong early verdict at most "
                             "1 - confidence of the time)", gt=0.5, lt=1),
    "slo.preset": limit_set_name,  # percentile limits by name; the limits themselves: _limit_value
    "cost.gpus": integer("GPUs serving the endpoint, e.g. 8, or null", ge=1, nullable=True),
    "cost.gpu_hour_usd": number("the price of one GPU for an hour, e.g. 2.5, or null", gt=0, nullable=True),
    "exporter.port": integer("a TCP port 1-65535, or 0 to turn the exporter off", ge=0, le=65535),
    "exporter.host": text("an address to bind, e.g. 127.0.0.1 (0.0.0.0 for all interfaces)"),
    "client_check.cpu_percent_max": number("percent of one core, e.g. 90", gt=0, le=100),
    "client_check.loop_lag_p99_s_max": number("seconds, e.g. 0.05", gt=0),
    "client_check.lateness_p99_s_max": number("seconds an open-loop send may be late, e.g. 0.005", gt=0),
    "gpu_metrics": url_list,
    "hosts": url_list,
    "replicas.policy": choice(REPLICA_POLICIES, "round_robin sends each request to the next host; least_inflight to "
                              "the host with the fewest requests in flight"),
    "replicas.metrics": url_list,
    "replicas.upstream_header": text("a response header naming the engine that served, e.g. X-Upstream-Addr, "
                                     "or null", nullable=True),
    "replicas.share_ratio_max": number("a ratio of shares, e.g. 1.5", gt=1),
    "replicas.slow_ratio": number("a ratio of medians (TTFT p50, TPOT p50), e.g. 2", gt=1),
    "results_dir": text("the results directory, where each run writes its own run folder, e.g. results"),
    "requests_jsonl": boolean(),
    "plots": boolean(),
}

_BODY = "request.extra_body"
_HEADERS = "request.headers"
# a percentile limit, slo.<metric>_p<percentile>_s (loadgen.slo.limits): a family of keys, not leaves
_limit_value = number("seconds, e.g. 2 (the stage's percentile must be <= it), or null", gt=0, nullable=True)


def _is_limit(path: str) -> bool:
    """``slo.ttft_p99_s`` and the like (checked by ``parse_limit_key``, which names the fix)."""
    section, _, leaf = path.partition(".")
    return section == "slo" and looks_like_limit_key(leaf) and parse_limit_key(leaf) is not None


class UnknownKey(ConfigError):
    """A key that is not part of the scenario; ``meant`` is the known dotted key it is closest to
    (None: none is), so a caller can say it the way the user wrote it (``--slo ttft_s=2``)."""

    def __init__(self, key: str, value: Any, fix: str, meant: str | None = None):
        super().__init__(key, value, "unknown key", fix)
        self.meant = meant


def unknown_key(path: str, value: Any) -> UnknownKey:
    """'did you mean' by the whole dotted key (typos), else by its last part (wrong section)."""
    known = [*SPEC, *SECTIONS]
    near = difflib.get_close_matches(path, known, n=1, cutoff=0.75)
    if not near:
        by_leaf = {k.rpartition(".")[2]: k for k in SPEC}
        leaf = difflib.get_close_matches(path.rpartition(".")[2], list(by_leaf), n=1, cutoff=0.75)
        near = [by_leaf[leaf[0]]] if leaf else []
    if near:
        return UnknownKey(path, value, f"did you mean {near[0]}?", near[0])
    parent = path.rpartition(".")[0]
    here = [k for k in known if k.rpartition(".")[0] == parent]
    return UnknownKey(path, value, "valid keys here: " + ", ".join(sorted(set(here))))


def _not_a_section(path: str, value: Any) -> ConfigError:
    if path == "stages" and isinstance(value, list):
        return ConfigError(
            path, value, "must be a mapping of stage settings", f"did you mean stages.list: {value}?"
        )
    example = next(k for k in SPEC if k.startswith(path + "."))
    return ConfigError(
        path, value, "must be a mapping of settings", f"indent its keys under it, e.g. {example}"
    )


def check_keys(doc: Mapping[Any, Any], where: str = "") -> None:
    """Raise on the first key that is not part of the scenario (extra_body is free-form)."""
    for key, value in doc.items():
        path = f"{where}.{key}" if where else str(key)
        if path in SPEC or _is_limit(path):
            continue
        if not where and key in SECTIONS:
            if value is not None and not isinstance(value, Mapping):
                raise _not_a_section(path, value)
            check_keys(value or {}, path)
            continue
        raise unknown_key(path, value)


def _lay_over(base: dict[str, Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """Put the file's values over the defaults; a section sets only the keys it names."""
    for key, value in doc.items():
        if key in SECTIONS:
            base[key].update(value or {})
        else:
            base[key] = value
    return base


def apply_overrides(doc: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Set dotted keys, e.g. {"stages.list": [1, 4], "request.extra_body.temperature": 0}."""
    for dotted, value in overrides.items():
        if dotted in SPEC:
            section, _, leaf = dotted.rpartition(".")
            (doc[section] if section else doc)[leaf] = value
        elif isinstance(dotted, str) and _is_limit(dotted):
            doc["slo"][dotted.partition(".")[2]] = value
        elif dotted in SECTIONS:
            check_keys({dotted: value})
            doc[dotted].update(value or {})
        elif isinstance(dotted, str) and dotted.startswith(_BODY + ".") and dotted != _BODY + ".":
            request = doc["request"]
            if not isinstance(request["extra_body"], dict):
                request["extra_body"] = {}
            node = request["extra_body"]
            *parents, leaf = dotted[len(_BODY) + 1 :].split(".")
            for part in parents:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[leaf] = value
        elif isinstance(dotted, str) and dotted.startswith(_HEADERS + ".") and dotted != _HEADERS + ".":
            request = doc["request"]  # one header laid over the file's (--header): the name as given
            name = dotted[len(_HEADERS) + 1:]
            given = request["headers"] if isinstance(request["headers"], dict) else {}
            request["headers"] = {**{k: v for k, v in given.items() if str(k).lower() != name.lower()}, name: value}
        else:
            raise unknown_key(str(dotted), value)


def _get(doc: dict[str, Any], dotted: str) -> Any:
    section, _, leaf = dotted.rpartition(".")
    return (doc[section] if section else doc)[leaf]


def _check_lengths(v: dict[str, Any]) -> None:
    """Each length distribution's problems (loadgen.workload.lengths.LengthDist.problems), the first raised."""
    from loadgen.workload.lengths import LengthDist

    for which, fixed in (("input", "input_tokens"), ("output", "output_tokens")):
        kind = v[f"{which}.dist"]
        dist = LengthDist(kind, v[fixed] if kind == "fixed" else None, v[f"{which}.mean"], v[f"{which}.std"],
                          v[f"{which}.min"], v[f"{which}.max"])
        for field, value, problem in dist.problems():
            key = fixed if field == "value" else f"{which}.{field}"
            raise ConfigError(key, value, f"{problem} ({which}.dist {kind})",
                              f"see docs/workloads.md 'Length distributions', e.g. {which}.dist: uniform, "
                              f"{which}.min: 100, {which}.max: 1000")


def _check_relations(v: dict[str, Any]) -> None:
    _check_lengths(v)
    n_in, prefix = v["input.min"] if v["input.dist"] != "fixed" else v["input_tokens"], v["prompt.shared_prefix_tokens"]
    if prefix >= n_in:
        raise ConfigError(
            "prompt.shared_prefix_tokens",
            prefix,
            f"must be < the shortest prompt ({n_in} tokens: input_tokens, or input.min)",
            f"use at most {n_in - 1} so every prompt has a unique part",
        )
    start, factor, top = v["stages.start"], v["stages.factor"], v["stages.max"]
    if top < start:
        raise ConfigError(
            "stages.max",
            top,
            f"must be >= stages.start ({start})",
            f"raise stages.max to at least {start} or lower stages.start",
        )
    steps = math.log(top / start) / math.log(factor)
    if steps > MAX_SWEEP_STAGES:
        raise ConfigError(
            "stages.factor",
            factor,
            f"is so close to 1 that {start}..{top} takes {math.ceil(steps)} stages",
            "use 2 to double concurrency each stage, or set stages.list",
        )
    _check_rates(v)
    if v["rate.burstiness"] != 1 and v["rate.arrival"] != "gamma":
        # vllm bench serve switches to gamma arrivals when --burstiness is not 1; here it would be
        # silently ignored, so say so
        raise ConfigError("rate.burstiness", v["rate.burstiness"], f"shapes gamma arrivals only, and "
                          f"rate.arrival is {v['rate.arrival']}", "add --arrival gamma (or leave burstiness at 1)")
    if v["cost.gpu_hour_usd"] is not None and v["cost.gpus"] is None:
        raise ConfigError("cost.gpu_hour_usd", v["cost.gpu_hour_usd"], "needs cost.gpus (the price is per GPU)",
                          "set the GPUs serving the endpoint too, e.g. --gpus 8")
    no_objective = not any(v[f"slo.{k}"] is not None for k in OBJECTIVES) and not v["slo.limits"]
    for key in ("slo.search", "slo.early_stop"):
        if v[key] and no_objective:
            raise ConfigError(key, True, "needs at least one objective",
                              "set slo.ttft_s, slo.tpot_s, slo.e2e_s, slo.itl_max_s, a percentile limit "
                              "(slo.ttft_p99_s) or slo.preset, e.g. --slo tpot_s=0.05")
    if v["request.thinking"] is not None and v["endpoint"] != "chat":
        raise ConfigError("request.thinking", v["request.thinking"], "applies to chat only (it is sent as "
                          "chat_template_kwargs.enable_thinking)", "set endpoint: chat, or drop request.thinking")
    if v["workload.turns"] > 1 and (v["rate.list"] is not None or v["rate.start"] is not None):
        raise ConfigError("workload.turns", v["workload.turns"], "needs the concurrency sweep (a turn waits for "
                          "the previous answer; open-loop arrivals do not)", "drop --turns or the rate stages")
    window, cap = v["stages.duration_s"], v["stages.max_window_s"]
    if v["stages.min_requests"] > 0 and cap < window:
        raise ConfigError(
            "stages.max_window_s",
            cap,
            f"must be >= stages.duration_s ({window:g}) when stages.min_requests is on",
            f"raise it to at least {window:g}",
        )


def _check_rates(v: dict[str, Any]) -> None:
    """rate.start and rate.max come together (and not with rate.list); max >= start; few stages."""
    listed, start, top, factor = v["rate.list"], v["rate.start"], v["rate.max"], v["rate.factor"]
    if listed is not None and start is not None:
        raise ConfigError("rate.start", start, "cannot be combined with rate.list",
                          "set one of them (--rates 1,2,4 or --rate-start/--rate-max)")
    if (start is None) != (top is None):
        key, value = ("rate.max", top) if start is None else ("rate.start", start)
        raise ConfigError(key, value, "needs both rate.start and rate.max",
                          "e.g. --rate-start 1 --rate-max 64 (and --rate-factor 2)")
    if start is None:
        return
    if top < start:
        raise ConfigError("rate.max", top, f"must be >= rate.start ({start:g})",
                          f"raise rate.max to at least {start:g}")
    if math.log(top / start) / math.log(factor) > MAX_SWEEP_STAGES:
        raise ConfigError("rate.factor", factor, f"is so close to 1 that {start:g}..{top:g} takes more "
                          f"than {MAX_SWEEP_STAGES} stages", "use 2 to double the rate each stage")


def build_scenario(doc: Any, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Validate a parsed scenario document (any subset of the keys; the rest take the defaults)
    plus dotted overrides, and return the frozen Scenario. Raises ConfigError."""
    if not isinstance(doc, Mapping):
        raise ConfigError(
            "scenario",
            Shown(reprlib.repr(doc)),
            "the top level must be a mapping of settings",
            "start from config/default.yaml",
        )
    check_keys(doc)
    merged = _lay_over(default_document(), doc)
    apply_overrides(merged, overrides or {})
    values = {dotted: check(dotted, _get(merged, dotted)) for dotted, check in SPEC.items()}
    values["slo.limits"] = collect_limits(merged["slo"], values["slo.preset"], _limit_value)
    _check_relations(values)
    sections = {
        name: cls(**{f.name: values[f"{name}.{f.name}"] for f in fields(cls)})
        for name, cls in SECTIONS.items()
    }
    top = {k: v for k, v in values.items() if "." not in k}
    if isinstance(top["model"], ModelMix):  # a mix: the first name stands for it where one model is needed
        top["model_mix"] = top["model"]
        top["model"] = top["model_mix"].names[0]
    return Scenario(**top, **sections)
