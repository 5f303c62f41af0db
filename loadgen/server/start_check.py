"""The start check, done once by the process that owns the run, before the first stage.

In order: the host (``client.check_host``, the one rule), ``GET /v1/models`` read once (the model,
its context length, llama.cpp's vocabulary, the server's flavor), then the KV capacity (the
scenario's value, else SGLang ``/get_server_info``, vLLM ``/metrics`` ``cache_config_info``,
SGLang's ``/metrics`` gauge), then the checks that need both (max_model_len, --require-guard).
The answer is a frozen ``ServerInfo``; a target that cannot be load-tested raises ``StartRefused``
with the exit code and the one line that says why (auth, not OpenAI, refused, too long a request,
a TLS certificate that did not verify). These messages live here and nowhere else; ``users``
quotes ``not_openai_message`` for the same finding mid-run.

Every request goes through ``StreamClient``: its failures are ``errors.RequestError`` kinds, and an
authentication failure is recognised by ``RequestError.status`` (401/403), not by message text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np
import orjson

from loadgen import errors
from loadgen.errors import ConfigError, LoadgenError, RequestError, ServerUnusableError, is_client_refusal
from loadgen.server.replies import (
    Capacity,
    ModelsInfo,
    capacity_from_server_info,
    capacity_from_sglang_metrics,
    capacity_from_vllm_metrics,
    failure_text,
    flavor_of,
    parse_metrics,
    parse_models,
    slots_from_props,
    unserved_models,
)
from loadgen.stats.failures import answer_words
from loadgen.wire.client import StreamClient, check_host
from loadgen.wire.compat import (
    Compat,
    adapt,
    initial,
    likely_fix,
    refused_token_id,
    vocabulary_search,
    with_vocabulary,
)
from loadgen.wire.endpoints import METRICS_PATH, MODELS_PATH, PATHS, PROPS_PATH, SERVER_INFO_PATH, server_root
from loadgen.wire.exchange import stream_ask
from loadgen.wire.scheme import scheme_mismatch
from loadgen.workload.asks import Ask
from loadgen.workload.dataset import too_long
from loadgen.workload.mix import known_input, scenario_mix, too_long_message
from loadgen.workload.prompts import TOKEN_ID_DTYPE, probe_prompt

PROBE_OUTPUT_TOKENS = 2
MAX_PROBES = 4  # the refusals we can adapt to, one at a time, and the try that works
PROBE_TIMEOUT_S = 5.0  # each capacity source; a missing one must not hold the start for long
AUTH_STATUSES = frozenset({401, 403})
INSECURE_WARNING = "TLS certificates are not verified (--insecure)"


class StartRefused(LoadgenError):
    """The run must not start: ``exit_code`` and the one line (``str(self)``) that says why."""

    def __init__(self, exit_code: int, message: str, probes: tuple = ()):
        self.exit_code = exit_code
        self.probes = probes  # probe requests sent before the refusal: (result, counted in the totals)
        super().__init__(message)


@dataclass(frozen=True)
class ServerInfo:
    """What the start check found. ``model`` is the one the run sends (given, else discovered);
    ``models`` is the /v1/models answer (None when it could not be read)."""

    model: str | None
    models: ModelsInfo | None
    capacity: Capacity
    compat: Compat = Compat()  # what the server accepts, as the probe request found
    probes: tuple = ()  # the probe requests: (records.RequestResult, counted in the run's totals)

    @property
    def max_model_len(self) -> int | None:
        return self.capacity.max_model_len

    @property
    def flavor(self) -> str | None:
        return self.capacity.flavor


@dataclass(frozen=True)
class ModelsReply:
    """One read of ``GET /v1/models``: the parsed answer, or the RequestError that prevented it."""

    info: ModelsInfo | None
    error: RequestError | None = None


def read_models(client: StreamClient) -> ModelsReply:
    """GET /v1/models once; never raises. A JSON answer listing no model is NOT_OPENAI."""
    try:
        info = parse_models(client.get_json(MODELS_PATH))
    except RequestError as exc:
        return ModelsReply(None, exc)
    if info.model is None:
        return ModelsReply(info, RequestError(errors.NOT_OPENAI, "GET /v1/models did not list a model"))
    return ModelsReply(info)


def discover_model(client: StreamClient) -> str:
    """The first model id from GET /v1/models (a worker without --model); else ServerUnusableError."""
    reply = read_models(client)
    if reply.error is None:
        return reply.info.model
    exc = reply.error
    if reply.info is not None:  # JSON, but no model listed
        raise ServerUnusableError("GET /v1/models did not list a model; is this an OpenAI-compatible "
                                  "server? Set --model to skip discovery", kind=exc.kind, detail=exc.message)
    fix = "" if isinstance(exc, errors.DiagnosedConnectFailure) else "; set the model with --model or `model:` in the scenario"
    raise ServerUnusableError(f"GET /v1/models failed ({exc}){fix}", kind=exc.kind, detail=exc.message)


def not_openai_message(host: str, what: str) -> str:
    """The one line that says the target does not speak the OpenAI API (``what``: the evidence)."""
    return (f"{host} is not an OpenAI-compatible server: {what}; check --host (the server's base URL, "
            "e.g. http://127.0.0.1:8000) and --endpoint")


def discover_capacity(client: StreamClient, models: ModelsReply) -> Capacity:
    """Try, in order: SGLang /get_server_info, vLLM /metrics cache_config_info, SGLang /metrics gauge,
    llama.cpp /props (slots x per-slot context; asked of a llama.cpp server, or of one whose
    /v1/models answered without naming a server we know).

    ``client`` talks to the server's root (``server_root(host)``). ``models`` is the start check's
    one read of /v1/models (flavor, max_model_len); a refused connection there ends the search.
    A failing source falls through to the next; ``detail`` says what was tried.
    """
    tried: list[str] = []
    info = models.info or ModelsInfo(None)
    # vLLM/SGLang max_model_len; llama.cpp meta.n_ctx, which is per slot (-c / -np): what one request gets
    max_model_len, flavor = info.max_model_len or info.n_ctx, info.flavor
    if models.error is not None:
        if models.error.kind == errors.CONNECT_FAILED:
            return Capacity(None, None, None, None,
                            f"KV capacity unknown: could not connect to the server ({models.error.message})")
        if models.info is None:
            tried.append(f"GET {MODELS_PATH}: {failure_text(models.error)}")

    def get(path: str, read: Callable[[str], object]) -> object:
        try:
            return read(path)
        except RequestError as exc:
            tried.append(f"GET {path}: {failure_text(exc)}")
            return None

    def found(tokens: int, source: str, flavor: str, how: str, slots: int | None = None) -> Capacity:
        tried.append(f"{tokens:,} tokens from {how}")
        return Capacity(tokens, source, flavor, max_model_len, "; ".join(tried), slots)

    server_info = get(SERVER_INFO_PATH, client.get_json)
    if tokens := capacity_from_server_info(server_info):
        return found(tokens, "sglang_server_info", "sglang", "GET /get_server_info max_total_num_tokens")
    if server_info is not None:
        tried.append("GET /get_server_info: no max_total_num_tokens")
    text = get(METRICS_PATH, client.get_text)
    samples = None if text is None else parse_metrics(text)
    flavor = flavor or flavor_of(samples or {})
    if tokens := capacity_from_vllm_metrics(samples or {}):
        return found(tokens, "vllm_cache_config", "vllm", "/metrics vllm:cache_config_info")
    if tokens := capacity_from_sglang_metrics(samples or {}):
        return found(tokens, "sglang_metrics", "sglang", "/metrics sglang:max_total_num_tokens")
    if samples is not None:
        tried.append("GET /metrics: no vllm:cache_config_info or sglang:max_total_num_tokens")
    if flavor == "llamacpp" or (flavor is None and models.info is not None):  # an OpenAI server we don't know
        props = get(PROPS_PATH, client.get_json)
        if slots := slots_from_props(props):
            return found(slots.tokens, "llamacpp_props", "llamacpp",
                         f"GET /props: {slots.total} slots x {slots.per_slot:,} tokens of context each (as "
                         f"per-slot caches; a unified cache, --kv-unified, holds {slots.per_slot:,} in all: "
                         "then set guard.kv_capacity_tokens)", slots.total)
        if props is not None:
            tried.append("GET /props: no total_slots or n_ctx")
    return Capacity(None, None, flavor, max_model_len, "KV capacity unknown: " + "; ".join(tried))


def resolve_capacity(configured: int | None, client: StreamClient, models: ModelsReply) -> Capacity:
    """The scenario's ``guard.kv_capacity_tokens`` wins when set; the server still gives flavor and
    max_model_len (and its own figure, quoted in ``detail`` when it differs)."""
    discovered = discover_capacity(client, models)
    if configured is None:
        return discovered
    detail = f"{configured:,} tokens from scenario guard.kv_capacity_tokens"
    if discovered.tokens is not None and discovered.tokens != configured:
        detail += f" (server reports {discovered.tokens:,} via {discovered.source})"
    return Capacity(configured, "scenario", discovered.flavor, discovered.max_model_len, detail, discovered.slots)


def _clients(host: str, api_key: str | None, headers: Mapping[str, str] | None,
             models_timeouts_s: tuple[float, float], probe_timeout_s: float) -> tuple[StreamClient, StreamClient]:
    """(client at ``host``, as the streams see it, for /v1/models; client at the server's root),
    both sending the API key and the scenario's headers (``request.headers``)."""
    connect_s, read_s = models_timeouts_s
    return (StreamClient(host, api_key=api_key, headers=headers, connect_timeout_s=connect_s, read_timeout_s=read_s),
            StreamClient(server_root(host), api_key=api_key, headers=headers, connect_timeout_s=probe_timeout_s,
                         read_timeout_s=probe_timeout_s))


def models_and_capacity(host: str, *, api_key: str | None = None, headers: Mapping[str, str] | None = None,
                        configured_capacity: int | None = None,
                        models_timeouts_s: tuple[float, float] = (PROBE_TIMEOUT_S, PROBE_TIMEOUT_S),
                        probe_timeout_s: float = PROBE_TIMEOUT_S) -> tuple[ModelsReply, Capacity]:
    """Read /v1/models once (``models_timeouts_s`` = connect, read) and resolve the capacity from
    the server's root, whatever the models answer was. Never raises for a bad server."""
    models_client, root_client = _clients(check_host(host), api_key, headers, models_timeouts_s, probe_timeout_s)
    try:
        models = read_models(models_client)
        return models, resolve_capacity(configured_capacity, root_client, models)
    finally:
        models_client.close()
        root_client.close()


def _refusal(host: str, exc: RequestError, key_env: str | None) -> StartRefused:
    """The one line for a /v1/models failure that stops the run (no model to fall back on)."""
    if isinstance(exc, errors.DiagnosedConnectFailure):  # the server runs; the message says what to fix
        message = f"cannot connect to {host}: {exc.message}"
    elif exc.kind == errors.CONNECT_FAILED:
        message = f"cannot connect to {host} ({exc.message}); is the server running? check --host"
    elif exc.kind == errors.NOT_OPENAI:
        message = not_openai_message(host, f"GET {MODELS_PATH}: {exc.message}" if exc.status else exc.message)
    elif exc.status in AUTH_STATUSES:
        where = f"the environment variable {key_env}" if key_env else "api_key_env"
        message = f"{host} refused the request (GET /v1/models: {exc.message}); check the API key in {where}"
    else:
        message = f"GET /v1/models failed ({exc}); set the model with --model or `model:` in the scenario"
    return StartRefused(errors.EXIT_SERVER_UNUSABLE, message)


def check_context(scenario, dataset, max_model_len: int) -> None:
    """Refuse (exit 2) requests that cannot fit the server's context: they would all be refused
    with a 400, so say so once instead of sweeping failures. A dataset: how many lines, the worst;
    synthetic lengths: the longest request the distributions (and turns) can draw."""
    turns = scenario.workload.turns
    if dataset:
        out = scenario.length_dist("output")
        count, worst = too_long(dataset, out.upper or scenario.output_tokens, max_model_len // turns)
        if count:
            worst_tokens = (known_input(worst) + (worst.output_tokens or out.upper or 0)) * turns
            raise StartRefused(errors.EXIT_CONFIG, too_long_message(count, len(dataset), worst.line, worst_tokens,
                                                                    max_model_len, scenario.workload.dataset))
        return
    need = scenario_mix(scenario).longest
    if need is not None and need > max_model_len:
        what = ("input_tokens + output_tokens" if scenario.input.dist == scenario.output.dist == "fixed"
                else "the longest input + output the length distributions allow")
        what += f" x {turns} turns" if turns > 1 else ""
        raise StartRefused(errors.EXIT_CONFIG, f"config error: {what} = {need:,} exceeds the server's max_model_len "
                           f"{max_model_len:,} (GET /v1/models); lower --input-tokens or --output-tokens "
                           "(input.max / output.max, --turns)")


def preflight(host: str | None, scenario, api_key: str | None, say: Callable[[str], None],
              dataset=None, fleet: Callable[[str | None, Capacity], Capacity] | None = None) -> ServerInfo:
    """The whole start check (module docstring). ``say`` prints one user-facing line (redacted by
    the caller). ``fleet(model, capacity)``: several replicas (``loadgen.server.replicas``): checks
    each and gives the fleet's capacity, which replaces ``host``'s. Raises StartRefused when the
    run must not start."""
    try:
        check_host(host)
    except ConfigError as exc:
        raise StartRefused(errors.EXIT_CONFIG, f"config error: {exc}") from None
    req = scenario.request
    if not req.verify_tls and urlsplit(host).scheme == "https":
        say(f"llm-loadgen: warning: {INSECURE_WARNING}")
    models_client, root_client = _clients(host, api_key, req.headers, (req.connect_timeout_s, req.read_timeout_s),
                                          PROBE_TIMEOUT_S)
    try:
        if (exc := scheme_mismatch(host, req.connect_timeout_s)) is not None:  # https://, before any request
            raise _refusal(host, exc, scenario.api_key_env)
        models = read_models(models_client)
        model = scenario.model
        if models.error is not None:
            exc = scheme_mismatch(host, req.connect_timeout_s, models.error) or models.error
            if model is None or exc.kind == errors.CONNECT_FAILED:
                raise _refusal(host, exc, scenario.api_key_env)
            going = f"the mix {scenario.model_mix.text()} unchecked" if scenario.model_mix else f"model {model!r}"
            say(f"llm-loadgen: warning: model discovery failed ({exc.message or exc}); going on with {going}")
        elif model is None:
            model = models.info.model
        elif scenario.model_mix is not None and (
                problem := unserved_models(scenario.model_mix.names, models.info)) is not None:
            raise StartRefused(errors.EXIT_CONFIG, f"config error: {problem}")
        capacity = resolve_capacity(scenario.guard.kv_capacity_tokens, root_client, models)
        if fleet is not None:
            capacity = fleet(model, capacity)
    finally:
        models_client.close()
        root_client.close()
    if capacity.max_model_len:
        check_context(scenario, dataset, capacity.max_model_len)
    if capacity.tokens is None:
        tried = capacity.detail.removeprefix("KV capacity unknown: ")
        say(f"llm-loadgen: KV capacity unknown ({tried}); running UNGUARDED "
            "(set guard.kv_capacity_tokens or --kv-capacity-tokens to guard)")
        if scenario.guard.require:
            raise StartRefused(errors.EXIT_GUARD_ABORT, "--require-guard is set and the server reports no "
                               "KV capacity; set --kv-capacity-tokens to the server's KV tokens")
    else:
        say(f"llm-loadgen: KV capacity {capacity.tokens:,} tokens (source: {capacity.source})")
    if capacity.slots:
        say(f"llm-loadgen: the server runs {capacity.slots} requests at once ({capacity.flavor} slots); "
            f"a stage above C={capacity.slots} queues the rest in the server")
    info = models.info or ModelsInfo(None)
    compat = initial(req.compat, info.owned_by, capacity.flavor, info.n_vocab, tuple(scenario.prompt.token_id_range))
    for note in compat.adaptations:
        say(f"llm-loadgen: adapting to the server: {note}")
    probe_client = StreamClient(host, api_key=api_key, headers=req.headers, connect_timeout_s=req.connect_timeout_s,
                                read_timeout_s=req.read_timeout_s)
    try:
        compat, probes = probe_request(probe_client, host, scenario, model, compat, say)
    finally:
        probe_client.close()
    say(f"llm-loadgen: {compat.describe()}")
    return ServerInfo(model, models.info, capacity, compat, probes)


def probe_request(client: StreamClient, host: str, scenario, model: str | None, compat: Compat,
                  say: Callable[[str], None]) -> tuple[Compat, tuple]:  # (Compat, ((result, counted), ...))
    """Send the run's request (its body, ``PROBE_OUTPUT_TOKENS`` output tokens) until the server
    takes it. A refusal (4xx other than 408/429, or not an SSE completion) is adapted to when
    ``request.compat`` is auto and ``loadgen.wire.compat.adapt`` knows how, else it stops the run here
    with the server's reason quoted. Anything else (5xx, overload, a stall) is the run's business.
    A refusal nothing can adapt to is tried once more (a server that fails one request in many must
    not stop the run). Returns the Compat that worked and every probe as (result, counted): a
    refusal that was adapted away is not counted in the run's totals (it is the start check's
    question to the server, listed in summary.json ``preflight``), every other probe is."""
    path = PATHS[scenario.endpoint]
    results, refused_before = [], None
    for _ in range(MAX_PROBES):
        ask = Ask(probe_prompt(scenario, compat.prompt_kind, compat.token_id_range), scenario.input_tokens,
                  PROBE_OUTPUT_TOKENS)
        result, _, _, body = stream_ask(client, scenario, model or "", compat, ask)
        probe = [result, True]
        results.append(probe)
        if result.ok or not is_client_refusal(result.error_kind or "", result.error_status):
            return compat, _frozen(results)
        status, message = result.error_status, result.error_message
        nxt = adapt(compat, status, message, orjson.loads(body)) if scenario.request.compat == "auto" else None
        if nxt is not None and nxt.prompt_kind != compat.prompt_kind and refused_token_id(message) is not None:
            nxt = find_vocabulary(client, scenario, model, compat, refused_token_id(message), results) or nxt
        if nxt is None and refused_before != (result.error_kind, status):
            refused_before = (result.error_kind, status)
            continue
        if nxt is None:
            if result.error_kind == errors.NOT_OPENAI:
                raise StartRefused(errors.EXIT_SERVER_UNUSABLE, not_openai_message(host, f"POST {path}: {message}"),
                                   _frozen(results))
            reason = message.removeprefix(f"HTTP {status}: ") if status is not None else message
            answer = f"{answer_words(result.error_kind, status)}: {reason}" if status is not None else reason
            raise StartRefused(errors.EXIT_SERVER_UNUSABLE, f"{host} refused the run's request (POST {path}: "
                               f"{answer}); {likely_fix(status, reason, path, model)}", _frozen(results))
        say(f"llm-loadgen: adapting to the server: {nxt.adaptations[-1]}")
        compat, refused_before = nxt, None
        probe[1] = False
    raise StartRefused(errors.EXIT_SERVER_UNUSABLE, f"{host} refused the run's request {MAX_PROBES} times "
                       f"(last: {probe[0].error_message}); see request.compat", _frozen(results))


def find_vocabulary(client: StreamClient, scenario, model: str | None, compat: Compat, refused_id: int,
                    results: list) -> Compat | None:
    """Token IDs inside a vocabulary the server does not report (vLLM) but whose refusal named an ID
    outside it: one-token prompts (1 output token) bisect between the range's lowest ID and the
    refused one (``compat.vocabulary_search``). Returns the Compat drawing inside it, or None (text
    prompts then) when the lowest ID is refused too or a try fails for another reason. Each try is
    appended to ``results``: those the server took are counted in the run's totals (they reach
    its engine and its token counters), the refused ones are not (the start check's questions)."""
    id_range = compat.token_id_range or tuple(scenario.prompt.token_id_range)
    low = id_range[0]
    if refused_id <= low:
        return None

    def takes(token_id: int) -> bool | None:
        ask = Ask(np.array([token_id], dtype=TOKEN_ID_DTYPE), 1, 1)
        result = stream_ask(client, scenario, model or "", compat, ask).result
        results.append([result, result.ok])
        if result.ok:
            return True
        if is_client_refusal(result.error_kind or "", result.error_status) and \
                refused_token_id(result.error_message) is not None:
            return False
        return None

    if not takes(low):
        return None
    search, tries = vocabulary_search(low, refused_id), 1
    try:
        token_id = next(search)
        while True:
            took = takes(token_id)
            tries += 1
            if took is None:
                return None
            token_id = search.send(took)
    except StopIteration as end:
        return with_vocabulary(compat, id_range, refused_id, end.value, tries)


def _frozen(results: list) -> tuple:
    return tuple((r, counted) for r, counted in results)
