"""Command-line options: our flags on Locust's (or any argparse) parser, and the scenario they
give (the file named by --scenario with every given option laid over it)."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from loadgen.config.build import UnknownKey
from loadgen.config.files import load_scenario
from loadgen.config.headers import parse_flags
from loadgen.config.schema import (
    ARRIVALS,
    DATASET_ORDERS,
    ENDPOINTS,
    GUARD_ACTIONS,
    LENGTH_DISTS,
    REPLICA_POLICIES,
    Scenario,
)
from loadgen.errors import ConfigError

# (flag, dotted key, type, help). A type that is a tuple means choices; bool means a flag that sets
# the key true, "off" one that sets it false.
# Defaults are None ("not given": the file wins); values arrive as text and are converted here,
# so a bad value gets the same one-line ConfigError as a bad file value, not an argparse usage dump.
_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("--input-tokens", "input_tokens", int, "prompt length in tokens"),
    ("--output-tokens", "output_tokens", int, "tokens generated per request"),
    *((f"--{w}-{k}", f"{w}.{k}", kind, f"{w} length: {what}") for w in ("input", "output") for k, kind, what in (
        ("dist", LENGTH_DISTS, "distribution (fixed = --input-tokens/--output-tokens)"),
        ("mean", float, "normal/lognormal mean in tokens"), ("std", float, "normal/lognormal std in tokens"),
        ("min", int, "shortest, in tokens"), ("max", int, "longest, in tokens (uniform: required)"))),
    ("--dataset", "workload.dataset", str, "JSONL/CSV file of requests (docs/workloads.md 'Datasets')"),
    ("--dataset-order", "workload.dataset_order", DATASET_ORDERS, "dataset requests in file order or shuffled"),
    ("--trace-speedup", "workload.trace_speedup", float, "a timestamped dataset replays this many times faster"),
    ("--turns", "workload.turns", int, "multi-turn: turns per conversation (history resent each turn)"),
    ("--endpoint", "endpoint", ENDPOINTS, "API to load: completions (/v1/completions) or chat (/v1/chat/completions)"),
    ("--model", "model", str, "model id (default: the first id from GET /v1/models), or a mix drawn per "
                              "request by weight, e.g. base=0.7,my-lora=0.3"),
    ("--api-key-env", "api_key_env", str, "NAME of the env var holding the API key (not the key)"),
    ("--header", "request.headers", "headers", "'Name: value' sent on every request to the server, e.g. "
                                               "'X-Api-Key: abc' (repeatable; credentials hidden in results)"),
    ("--results-dir", "results_dir", str, "results directory: each run writes its own run folder in it (summary.json, stages.csv, ...)"),
    ("--requests-jsonl", "requests_jsonl", bool, "write requests.jsonl in the run folder: one JSON line per "
                                                 "request (docs/results.md 'Per-request export')"),
    ("--no-plots", "plots", "off", "no PNG plots when the run ends (report.html without images; "
                                   "`llm-loadgen report build RUN` draws them later)"),
    ("--stages", "stages.list", "stages", "stage concurrencies, e.g. 1,4,16 (strictly increasing)"),
    ("--stage-duration", "stages.duration_s", float, "measured seconds per stage"),
    ("--slice-s", "stages.slice_s", float, "soak: cut every window into slices this many seconds long"),
    ("--warmup", "stages.warmup_s", float, "seconds per stage excluded from statistics"),
    ("--ramp", "stages.ramp_s", float, "seconds to start each stage's users"),
    ("--min-requests", "stages.min_requests", int, "extend each window until this many requests finished"),
    ("--rates", "rate.list", "rates", "open loop: requests/s per stage, e.g. 1,2,4,8 (strictly increasing)"),
    ("--rate-start", "rate.start", float, "open loop, geometric: the first stage's requests/s"),
    ("--rate-factor", "rate.factor", float, "open loop, geometric: rate x this each stage"),
    ("--rate-max", "rate.max", float, "open loop, geometric: the last stage's requests/s"),
    ("--arrival", "rate.arrival", ARRIVALS, "open loop: arrival process"),
    ("--burstiness", "rate.burstiness", float, "open loop, gamma arrivals: shape (1 = Poisson, < 1 burstier)"),
    ("--arrival-seed", "rate.seed", int, "open loop: seed of the arrival schedule"),
    ("--max-inflight", "rate.max_inflight", int, "open loop: requests in flight per process; more are dropped"),
    ("--shared-prefix-tokens", "prompt.shared_prefix_tokens", int, "leading tokens shared by all prompts"),
    (
        "--kv-capacity-tokens",
        "guard.kv_capacity_tokens",
        int,
        "KV cache size in tokens (default: ask the server)",
    ),
    ("--guard-margin", "guard.margin", float, "projected tokens *= (1 + margin)"),
    ("--guard-action", "guard.action", GUARD_ACTIONS, "what to do with a stage over KV capacity"),
    ("--require-guard", "guard.require", bool, "fail if the KV capacity is unknown"),
    ("--slo", "slo", "pairs", "SLO objectives, e.g. ttft_s=2,tpot_s=0.05 (any slo.* key)"),
    ("--slo-search", "slo.search", bool, "after the sweep, bisect for the largest concurrency meeting the SLO"),
    ("--slo-early-stop", "slo.early_stop", bool, "close a stage's window once its SLO verdict is decided "
                                                  "with slo.confidence (docs/slo.md 'Early stop')"),
    ("--gpus", "cost.gpus", int, "GPUs serving the endpoint: tokens/s per GPU (docs/metrics.md 'Cost and efficiency')"),
    ("--gpu-hour-usd", "cost.gpu_hour_usd", float, "price of one GPU-hour: $ per million tokens (needs --gpus)"),
    ("--gpu-metrics", "gpu_metrics", "urls", "a DCGM exporter's /metrics URL, one per node: power, utilisation, "
                                             "memory and J/token per stage (repeatable; docs/monitoring.md)"),
    ("--replica-policy", "replicas.policy", REPLICA_POLICIES, "with --host given more than once: the host each "
                                                              "request goes to (docs/replicas.md)"),
    ("--replica-metrics", "replicas.metrics", "urls", "behind a router (--host ROUTER): one engine's URL, its root or "
                                                      "/metrics: capacities summed, each watched (repeatable)"),
    ("--upstream-header", "replicas.upstream_header", str, "behind a router: the response header naming the engine "
                                                           "that served, e.g. X-Upstream-Addr (per-replica rows)"),
    ("--exporter-port", "exporter.port", int, "Prometheus exporter port (0: off)"),
    ("--exporter-host", "exporter.host", str, "Prometheus exporter bind address"),
    ("--ca-cert", "request.ca_cert", str, "PEM file of the server's CA (or its own certificate), trusted instead "
                                          "of the system store, as curl --cacert"),
    ("--insecure", "request.verify_tls", "off", "do not check the server's TLS certificate or host name"),
    # The run's own tags (not scenario keys): summary.json run.label / run.metadata, the run name
    # (loadgen.config.run_tags).
    ("--label", "run.label", "label", "a tag for this run, added to its name and folder, e.g. fp8-kv"),
    ("--metadata", "run.metadata", "metadata", "KEY=VALUE facts about this run, e.g. tp=8 image=v0.9 "
                                               "(repeatable; kept in summary.json run.metadata)"),
    # The spellings of `vllm bench serve` and `sglang.bench_serving` where the meaning is ours too
    # (docs/coming-from-vllm-sglang.md 'Different meaning' says where it is not).
    ("--request-rate", "rate.list", "one_rate", "one open-loop stage at this many requests/s (same as --rates R)"),
    ("--max-concurrency", "stages.list", "one_stage", "one stage at this concurrency (same as --stages C)"),
    ("--random-input-len", "input_tokens", int, "same as --input-tokens (vLLM's default range ratio 0)"),
    ("--random-output-len", "output_tokens", int, "same as --output-tokens (vLLM's default range ratio 0)"),
    ("--seed", "prompt.seed", "seed", "seeds prompts, lengths and dataset order, and the arrival schedule "
                                     "unless --arrival-seed is given"),
)

# Kinds whose value is not a scenario key: the run's tags, read by loadgen.config.run_tags.
RUN_TAG_KINDS = ("label", "metadata")


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _metavar(flag: str, dotted: str) -> str:
    """The value's unit where the key names one (``stages.duration_s`` -> SECONDS), else the flag."""
    if dotted.endswith("_s"):
        return "SECONDS"
    if dotted.endswith("tokens"):
        return "TOKENS"
    return _dest(flag).upper()


class _RepeatedHost(argparse._StoreAction):
    """Locust's ``--host``, given more than once: every value in ``hosts`` (the replicas the
    client spreads the load over, docs/replicas.md), the first in ``host`` (what Locust uses)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = [*(getattr(namespace, "hosts", None) or []), values]
        namespace.hosts = given
        setattr(namespace, self.dest, given[0])


def repeatable_host(parser: Any) -> None:
    """Let Locust's ``--host`` repeat (``_RepeatedHost``); a parser without one is left alone."""
    action = getattr(parser, "_option_string_actions", {}).get("--host")
    if action is not None and type(action) is argparse._StoreAction:
        action.__class__ = _RepeatedHost
        parser.set_defaults(hosts=None)


def register_options(parser: Any) -> None:
    """Add the scenario options to Locust's parser (``events.init_command_line_parser``) or any
    argparse parser. They are kept out of Locust's web UI form; values land in
    ``environment.parsed_options`` under the flag's name (``--input-tokens`` -> ``input_tokens``)."""
    group = parser.add_argument_group("llm-loadgen scenario", "Each option overrides the scenario file.")

    def add(*args: Any, **kwargs: Any) -> None:
        # Locust shows an option in its web UI only if the action's include_in_web_ui is true; an
        # argument group's add_argument does not accept the kwarg, so set the attribute directly.
        group.add_argument(*args, **kwargs).include_in_web_ui = False

    add("--scenario", default=None, metavar="PATH", help="a bundled scenario's name (llm-loadgen scenarios) or a scenario YAML file "
        "(default: the bundled scenario default)")
    for flag, dotted, kind, text in _OPTIONS:
        if kind == "metadata":
            add(flag, action="append", nargs="+", default=None, metavar="KEY=VALUE", help=f"{text} [{dotted}]")
        elif kind == "headers":
            add(flag, action="append", default=None, metavar="'NAME: VALUE'", help=f"{text} [{dotted}]")
        elif kind == "urls":
            add(flag, action="append", default=None, metavar="URL", help=f"{text} [{dotted}]")
        elif kind is bool or kind == "off":
            add(flag, action="store_true", default=False, help=f"{text} [{dotted}{'' if kind is bool else ' = false'}]")
        elif isinstance(kind, tuple):
            # no argparse `choices`: a bad value gets our one-line error naming the fix
            add(flag, default=None, metavar="{" + ",".join(kind) + "}", help=f"{text} [{dotted}]")
        else:
            add(flag, default=None, metavar=_metavar(flag, dotted), help=f"{text} [{dotted}]")
    add("--repeat", default=None, metavar="N", help="llm-loadgen only: the sweep N times, seeds --seed S+k, each a run "
        "folder, and repeat.json with 95 %% intervals (docs/results.md 'Repeats and the regression gate')")
    add(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="set any scenario key, e.g. --set request.extra_body.temperature=0 (VALUE is YAML; repeatable)",
    )


def _parse_set(item: str) -> tuple[str, Any]:
    key, eq, text = str(item).partition("=")
    if not eq or not key.strip():
        raise ConfigError("--set", item, "must be KEY=VALUE", "e.g. --set stages.list=[1,4]")
    try:
        return key.strip(), yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(
            f"{key.strip()} (from --set)",
            text,
            "is not a valid YAML value",
            "quote text values, e.g. --set model='\"my-model\"'",
        ) from None


def _convert(flag: str, dotted: str, kind: Any, raw: Any, typed: dict[str, str]) -> Any:
    """Text from the command line -> a typed value. Text that does not convert is passed on
    unchanged so the field's own check reports it (with its fix). ``typed`` gets the value text
    of each NAME=VALUE pair."""
    if kind == "off":
        return not raw  # the flag given (True, also as relayed by the Locust master): the key false
    if kind == "headers":  # a list (repeatable), also as relayed by the Locust master
        return {f"{dotted}.{name}": value for name, value in parse_flags([raw] if isinstance(raw, str) else raw).items()}
    if kind == "urls":  # a list (repeatable), also as relayed by the Locust master
        return [raw] if isinstance(raw, str) else list(raw)
    if not isinstance(raw, str):
        return raw  # already typed (e.g. options relayed by the Locust master)
    if kind is int or kind is float:
        try:
            return kind(raw.strip())
        except ValueError:
            return raw
    if kind == "pairs":
        return _pairs(flag, dotted, raw, typed)
    if kind in ("one_rate", "one_stage"):
        number = float if kind == "one_rate" else int
        if kind == "one_rate" and raw.strip().lower() in ("inf", "infinity"):
            raise ConfigError(f"{dotted} (from {flag})", raw, "is vllm bench serve's 'every request at once'; "
                              "a rate stage needs a finite rate", "for a closed loop of C requests in flight "
                              "pass --max-concurrency C instead")
        try:
            return [number(raw.strip())]
        except ValueError:
            what = "a number of requests/s, e.g. 4" if kind == "one_rate" else "a whole number, e.g. 64"
            raise ConfigError(f"{dotted} (from {flag})", raw, f"must be {what}", f"e.g. {flag} "
                              f"{'4' if kind == 'one_rate' else '64'}") from None
    if kind == "seed":
        try:
            value = int(raw.strip())
        except ValueError:
            return raw
        return {"prompt.seed": value, "rate.seed": value}
    if kind == "rates":
        try:
            return [float(part.strip()) for part in raw.split(",")]
        except ValueError:
            raise ConfigError(f"{dotted} (from {flag})", raw, "must be comma-separated numbers (requests/s)",
                              "e.g. --rates 0.5,1,2,4") from None
    if kind == "stages":
        values = []
        for part in raw.split(","):
            try:
                values.append(int(part.strip()))
            except ValueError:
                raise ConfigError(
                    f"{dotted} (from {flag})",
                    raw,
                    f"must be comma-separated whole numbers; {part.strip()!r} is not one",
                    "e.g. --stages 1,4,16",
                ) from None
        return values
    return raw


def _pairs(flag: str, dotted: str, raw: str, typed: dict[str, str]) -> dict[str, Any]:
    """``"ttft_s=2,tpot_s=0.05"`` -> {"slo.ttft_s": 2, "slo.tpot_s": 0.05} (values are YAML);
    ``typed`` gets {"slo.ttft_s": "2", ...}, each value as written."""
    out = {}
    for part in raw.split(","):
        name, eq, text = part.partition("=")
        if not eq or not name.strip() or not text.strip():
            raise ConfigError(f"{dotted} (from {flag})", raw, f"must be NAME=VALUE pairs; {part.strip()!r} is not one",
                              f"e.g. {flag} ttft_s=2,tpot_s=0.05")
        typed[f"{dotted}.{name.strip()}"] = text.strip()
        try:
            out[f"{dotted}.{name.strip()}"] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"{dotted}.{name.strip()} (from {flag})", text, "is not a valid value",
                              f"e.g. {flag} ttft_s=2") from None
    return out


def scenario_from_options(parsed_options: Any) -> Scenario:
    """The scenario file named by --scenario (default config/default.yaml) with every given option
    laid over it: --set first, then the named options. A ConfigError about a value that came from
    the command line names the flag, e.g. ``stages.list (from --stages): ...``, and an unknown
    key's "did you mean" is spelled for that flag (``as_typed``)."""
    overrides: dict[str, Any] = {}
    origin = {"scenario": "--scenario"}
    typed: dict[str, str] = {}  # key -> its value as written on the command line
    for item in getattr(parsed_options, "set", None) or []:
        key, value = _parse_set(item)
        overrides[key] = value
        origin[key] = "--set"
        typed[key] = str(item).partition("=")[2].strip()
    _refuse_capped_rate(parsed_options)
    hosts = getattr(parsed_options, "hosts", None) or []
    if len(hosts) > 1:  # --host repeated: the replicas (one --host is Locust's own)
        overrides["hosts"], origin["hosts"] = list(hosts), "--host"
    for flag, dotted, kind, _ in _OPTIONS:
        raw = getattr(parsed_options, _dest(flag), None)
        if raw is None or raw is False or kind in RUN_TAG_KINDS:
            continue
        value = _convert(flag, dotted, kind, raw, typed)
        for key, v in (value.items() if isinstance(value, dict) and kind in ("pairs", "seed", "headers")
                       else [(dotted, value)]):
            if origin.get(key, "--set") != "--set":  # a second flag for the same key
                if kind == "seed":
                    continue  # --arrival-seed is the more specific: it wins over --seed
                if overrides[key] != v:
                    raise ConfigError(f"{key} (from {flag})", raw, f"is also given by {origin[key]} with "
                                      f"another value", f"pass one of {origin[key]} and {flag}")
            overrides[key] = v
            origin[key] = flag
    try:
        return load_scenario(getattr(parsed_options, "scenario", None), overrides)
    except ConfigError as e:
        where = origin.get(e.key.partition("[")[0])
        if where is None:
            raise
        fix = e.fix
        if isinstance(e, UnknownKey) and e.meant is not None:
            fix = f"did you mean {as_typed(e.meant, where, typed.get(e.key, '...'))}?"
        raise ConfigError(f"{e.key} (from {where})", e.value, e.problem, fix) from None


def _refuse_capped_rate(parsed_options: Any) -> None:
    """vLLM's and SGLang's --request-rate with --max-concurrency is an open loop whose arrivals
    queue in the client above the cap; we have no such queue (our --max-inflight drops them), so
    the pair would not mean what its user expects."""
    rate, cap = (getattr(parsed_options, n, None) for n in ("request_rate", "max_concurrency"))
    if rate is not None and cap is not None:
        raise ConfigError("--max-concurrency", cap, "cannot be combined with --request-rate: vllm bench serve "
                          "then queues arrivals in the client above the cap, and llm-loadgen does not queue",
                          "pass one: --request-rate R (one open-loop stage; --max-inflight N drops "
                          "arrivals above N) or --max-concurrency C (one closed-loop stage)")


def as_typed(key: str, flag: str, text: str) -> str:
    """Scenario key ``key`` set to ``text`` the way it is written with ``flag``: a pairs flag takes
    the keys of its section as NAME=VALUE (``--slo ttft_s=2``); any key is ``--set key=text``."""
    section = next((dotted for f, dotted, kind, _ in _OPTIONS if f == flag and kind == "pairs"), None)
    if section is not None and key.startswith(section + "."):
        return f"{flag} {key[len(section) + 1:]}={text}"
    return f"--set {key}={text}"
