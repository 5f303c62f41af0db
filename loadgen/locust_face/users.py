"""Locust users: glue between the streaming client, synthetic prompts, records and the runtime.

Each user is one closed-loop stream: send, read to the end, record, send again (no think time), so
the number of users is the concurrency. Each LLM request is one entry in Locust's own stats
(name = endpoint path, response time = E2E in ms), so the web UI, ``--csv`` and ``--html`` keep
working; TTFT/ITL/TPOT go into our own histograms (Locust rounds times to ~2 significant digits).
"""

from __future__ import annotations

import itertools
import time

import gevent
from gevent.lock import Semaphore
from locust import User, constant, task
from locust.exception import StopUser

from loadgen.errors import CONNECT_FAILED, NOT_OPENAI, RequestError, ServerUnusableError
from loadgen.server.start_check import PATHS, not_openai_message
from loadgen.stats.failures import LocustFailure, is_client_refusal, locust_name
from loadgen.stats.records import RequestRecord
from loadgen.wire.client import StreamClient
from loadgen.wire.compat import Compat, build_body, refusal_line
from loadgen.workload.asks import Ask, DatasetCursor, PromptMaker, TextFit, Workload
from loadgen.workload.conversation import Conversation
from loadgen.workload.dataset import share
from loadgen.workload.prompts import ChatPrompts, fit_word_count

_user_numbers = itertools.count()
_calibration_lock = Semaphore()
_text_words: dict[tuple[str, int], int] = {}
_text_fits: dict[str, TextFit] = {}
FIT_PROBE_WORDS = (64, 512)  # the two probes of a text calibration over many lengths


def _process_key(environment) -> int:
    """This process's place in the run (the worker index the master assigned; 0 locally), so
    prompts differ across workers yet repeat from run to run with the same seed and workers."""
    return int(getattr(environment.runner, "worker_index", 0) or 0)


def request_body(scenario, model: str, prompt, compat: Compat, output_tokens: int | None = None) -> bytes:
    """The JSON body of one streaming request (``loadgen.wire.compat.build_body``)."""
    return build_body(scenario, model, prompt, compat, output_tokens)


def ask_body(scenario, model: str, ask: Ask, compat: Compat) -> tuple[bytes, Ask]:
    """The body of ``ask``'s request and ``ask.sent()``: the body carries
    the prompt while the request streams, so the Ask kept beside it drops its copy."""
    return request_body(scenario, model, ask.prompt, compat, ask.output_tokens), ask.sent()


def _measure(client: StreamClient, scenario, model: str):
    """words -> the server's usage.prompt_tokens for a text prompt of that many words."""
    probe = ChatPrompts(1, (scenario.prompt.seed, 0xCA1))

    def measure(words: int) -> int:
        body = {"model": model, "max_tokens": 1, "stream": False}
        if scenario.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": probe.text(words)}]
        else:
            body["prompt"] = probe.text(words)
        return int(client.post_json(PATHS[scenario.endpoint], body)["usage"]["prompt_tokens"])

    return measure


def text_word_count(client: StreamClient, scenario, model: str) -> int:
    """Words per text prompt so the server counts exactly ``input_tokens`` (cached per process and
    endpoint): chat messages, or a completions prompt sent as text (a server that refuses token IDs)."""
    target, endpoint = scenario.input_tokens, scenario.endpoint
    with _calibration_lock:
        if (endpoint, target) not in _text_words:
            _text_words[(endpoint, target)], _ = fit_word_count(target, _measure(client, scenario, model))
        return _text_words[(endpoint, target)]


def text_fit(client: StreamClient, scenario, model: str) -> TextFit:
    """The text calibration of this process: exact for the one fixed length (``fit_word_count``),
    else tokens = a x words + b through two probes (loadgen.workload.asks.TextFit)."""
    if scenario.input.dist == "fixed" and not scenario.workload.dataset and scenario.workload.turns == 1:
        return TextFit(1.0, 0.0, {scenario.input_tokens: text_word_count(client, scenario, model)})
    with _calibration_lock:
        if scenario.endpoint not in _text_fits:
            measure = _measure(client, scenario, model)
            w1, w2 = FIT_PROBE_WORDS
            _text_fits[scenario.endpoint] = TextFit.from_probes(w1, measure(w1), w2, measure(w2))
        return _text_fits[scenario.endpoint]


def dataset_part(environment) -> tuple[int, int]:
    """(this process's index, load processes): a worker's index of the master's --expect-workers
    (relayed with the options), a local run (0, 1)."""
    runner = environment.runner
    from locust.runners import WorkerRunner

    if not isinstance(runner, WorkerRunner):
        return 0, 1
    parts = int(getattr(environment.parsed_options, "expect_workers", 1) or 1)
    return int(runner.worker_index or 0) % parts, parts


def dataset_cursor(rt) -> DatasetCursor | None:
    """This process's share of the dataset (one cursor for all its users), or None (synthetic)."""
    if rt.dataset is None:
        return None
    if getattr(rt, "_dataset_cursor", None) is None:
        sc = rt.scenario
        part, parts = dataset_part(rt.environment)
        rt._dataset_cursor = DatasetCursor(share(rt.dataset, part, parts, sc.workload.dataset_order == "shuffled",
                                                 sc.prompt.seed))
    return rt._dataset_cursor


def prompt_source(rt, client: StreamClient, model: str, seed_key: tuple) -> Workload | Conversation:
    """The requests one user sends (loadgen.workload.asks): token IDs (completions), calibrated text
    (completions on a server that refuses token IDs), or calibrated chat messages; lengths from
    the scenario's distributions, or the process's share of the dataset."""
    sc, compat = rt.scenario, rt.compat
    id_range = compat.token_id_range or tuple(sc.prompt.token_id_range)
    if sc.endpoint == "completions" and compat.prompt_kind == "token_ids":
        maker = PromptMaker("token_ids", id_range, seed_key, sc.prompt.shared_prefix_tokens, sc.prompt.seed)
    else:
        maker = PromptMaker("chat" if sc.endpoint == "chat" else "text", id_range, seed_key,
                            fit=text_fit(client, sc, model))
    workload = Workload(maker, sc.length_dist("input"), sc.length_dist("output"), seed_key, dataset_cursor(rt),
                        hash_salt=sc.prompt.seed)
    return Conversation(workload, sc.workload.turns) if sc.workload.turns > 1 else workload


def send_request(user, client: StreamClient, body: bytes, record: RequestRecord, stage: int | None,
                 ask=None):
    """Send one request, account for it (in flight, statistics, Locust's stats) and return its
    RequestResult. ``record.sent_s`` is when it counts as sent: now (closed loop) or its scheduled
    time (open loop). ``ask`` (loadgen.workload.asks.Ask): the lengths this request expects (default:
    the scenario's fixed ones). Shared by the closed-loop user and the open-loop dispatcher."""
    rt, path = user.rt, user.path
    sc = rt.scenario
    rt.request_started(stage)
    start_wall = time.time()
    result = None
    try:
        result, nbytes = client.stream(path, body, record, on_tokens=rt.on_tokens)
    except gevent.GreenletExit:  # stopped mid-request (Ctrl-C, drain timeout, users moved to a new worker)
        rt.collector.record_cancelled(stage, record.chunk_tokens_seen)
        raise
    finally:
        rt.request_finished(stage, ok=result is not None and result.ok)
    if not result.ok:
        result.error_message = rt.redact(result.error_message)  # a server may echo the key back
    expected = (sc.input_tokens, sc.output_tokens) if ask is None else (ask.input_tokens, ask.output_tokens)
    turn = ask.turn if ask is not None and sc.workload.turns > 1 else None
    rt.collector.record_result(result, stage, *expected, sc.slo, turn=turn)
    user.environment.events.request.fire(
        request_type="POST",
        name=path,
        response_time=(result.e2e_s or 0.0) * 1000.0,
        response_length=nbytes,
        response=None,
        context={"stage": stage},
        exception=None if result.ok else LocustFailure(locust_name(result.error_kind, result.error_status)),
        start_time=start_wall,
        url=path,
    )
    if result.ok:
        rt.any_ok = True
    elif result.error_kind == NOT_OPENAI and not rt.any_ok:
        rt.fatal(ServerUnusableError(not_openai_message(user.host, f"POST {path}: {result.error_message}")))
    if rt.fail_fast.observe(result.ok, result.error_kind, result.error_status, result.error_message):
        rt.fatal(refusal_line(user.host, path, rt.fail_fast, user.model))
    return result


class LLMUser(User):
    """One closed-loop streaming client of an OpenAI-compatible server."""

    wait_time = constant(0)

    def on_start(self) -> None:
        rt = self.environment.llm
        sc = rt.scenario
        self.rt = rt
        self.client = StreamClient(
            self.host,
            api_key=rt.api_key,
            connect_timeout_s=sc.request.connect_timeout_s,
            read_timeout_s=sc.request.read_timeout_s,
        )
        self.path = PATHS[sc.endpoint]
        key = (sc.prompt.seed, _process_key(self.environment), next(_user_numbers))
        self.model = None
        self.prompts = None  # on first use: needs the model and what the server accepts (rt.compat)
        self._seed_key = key

    def on_stop(self) -> None:
        self.client.close()

    def _prepare(self) -> None:
        rt = self.rt
        try:
            self.model = rt.model(self.client)
            if self.prompts is None:
                self.prompts = prompt_source(rt, self.client, self.model, self._seed_key)
        except (ServerUnusableError, RequestError) as exc:
            rt.fatal(exc)
            raise StopUser() from None  # the run stops with one clear line, not a traceback per user

    @task
    def generate(self) -> None:
        rt = self.rt
        if not rt.kind.sends_requests or rt.fatal_sent or rt.compat is None:
            # not sending now, or a fatal error (the run is stopping), or a worker that has not yet
            # heard from the master what the server accepts
            gevent.sleep(0.2)
            return
        if self.model is None or self.prompts is None:
            self._prepare()
        sc = rt.scenario
        ask = self.prompts.next()
        body, ask = ask_body(sc, self.model, ask, rt.compat)
        stage = rt.measuring
        record = RequestRecord(time.perf_counter(), ask.output_tokens, sc.endpoint)
        result = send_request(self, self.client, body, record, stage, ask)
        self.prompts.answered(ask, result.ok, result.completion_tokens)
        self._after(result)

    def _after(self, result) -> None:
        """Pause after a refusal or a refused connection (never a flood of either)."""
        rt = self.rt
        if result.error_kind == CONNECT_FAILED:
            # The server is down (killed, restarting): every user of this process retries at one
            # shared, growing pause instead of thousands of instant refusals a second.
            gevent.sleep(rt.connect_backoff.failed())
        else:
            rt.connect_backoff.reset()
        if not result.ok and is_client_refusal(result.error_kind, result.error_status) and not rt.fatal_sent:
            # a server that starts refusing mid-run is not hammered either: each user pauses
            gevent.sleep(rt.scenario.request.client_error_pause_s)
