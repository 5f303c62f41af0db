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

from loadgen.client import StreamClient
from loadgen.compat import Compat, build_body, refusal_line
from loadgen.errors import CONNECT_FAILED, NOT_OPENAI, RequestError, ServerUnusableError
from loadgen.failures import LocustFailure, is_client_refusal, locust_name
from loadgen.preflight import PATHS, not_openai_message
from loadgen.prompts import ChatPrompts, TextPrompts, TokenIdPrompts, fit_word_count
from loadgen.records import RequestRecord

CONNECT_BACKOFF_S = (0.05, 1.0)  # first and longest pause after a refused connection
_user_numbers = itertools.count()
_calibration_lock = Semaphore()
_text_words: dict[tuple[str, int], int] = {}


def _process_key(environment) -> int:
    """This process's place in the run (the worker index the master assigned; 0 locally), so
    prompts differ across workers yet repeat from run to run with the same seed and workers."""
    return int(getattr(environment.runner, "worker_index", 0) or 0)


def request_body(scenario, model: str, prompt, compat: Compat) -> bytes:
    """The JSON body of one streaming request (``loadgen.compat.build_body``)."""
    return build_body(scenario, model, prompt, compat)


def text_word_count(client: StreamClient, scenario, model: str) -> int:
    """Words per text prompt so the server counts exactly ``input_tokens`` (cached per process and
    endpoint): chat messages, or a completions prompt sent as text (a server that refuses token IDs)."""
    target, endpoint = scenario.input_tokens, scenario.endpoint
    with _calibration_lock:
        if (endpoint, target) not in _text_words:
            probe = ChatPrompts(1, (scenario.prompt.seed, 0xCA1))

            def measure(words: int) -> int:
                body = {"model": model, "max_tokens": 1, "stream": False}
                if endpoint == "chat":
                    body["messages"] = [{"role": "user", "content": probe.text(words)}]
                else:
                    body["prompt"] = probe.text(words)
                return int(client.post_json(PATHS[endpoint], body)["usage"]["prompt_tokens"])

            _text_words[(endpoint, target)], _ = fit_word_count(target, measure)
        return _text_words[(endpoint, target)]


def prompt_source(rt, client: StreamClient, model: str, seed_key: tuple):
    """The prompts one user sends: token IDs (completions), calibrated text (completions on a
    server that refuses token IDs), or calibrated chat messages."""
    sc, compat = rt.scenario, rt.compat
    if sc.endpoint == "completions" and compat.prompt_kind == "token_ids":
        return TokenIdPrompts(sc.input_tokens, compat.token_id_range or tuple(sc.prompt.token_id_range), seed_key,
                              sc.prompt.shared_prefix_tokens, shared_seed=sc.prompt.seed)
    words = text_word_count(client, sc, model)
    return ChatPrompts(words, seed_key) if sc.endpoint == "chat" else TextPrompts(words, seed_key)


def send_request(user, client: StreamClient, body: bytes, record: RequestRecord, stage: int | None):
    """Send one request, account for it (in flight, statistics, Locust's stats) and return its
    RequestResult. ``record.sent_s`` is when it counts as sent: now (closed loop) or its scheduled
    time (open loop). Shared by the closed-loop user and the open-loop dispatcher."""
    rt, path = user.rt, user.path
    sc = rt.scenario
    rt.request_started(stage)
    start_wall = time.time()
    result = None
    try:
        result, nbytes = client.stream(path, body, record, on_tokens=rt.on_tokens)
    except gevent.GreenletExit:  # stopped mid-request (Ctrl-C, drain timeout)
        rt.cancelled[stage] = rt.cancelled.get(stage, 0) + 1
        raise
    finally:
        rt.request_finished(stage, ok=result is not None and result.ok)
    if not result.ok:
        result.error_message = rt.redact(result.error_message)  # a server may echo the key back
    rt.collector.record_result(result, stage, sc.input_tokens, sc.output_tokens)
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
        self._backoff_s = 0.0
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
        body = request_body(sc, self.model, self.prompts.next(), rt.compat)
        stage = rt.measuring
        record = RequestRecord(time.perf_counter(), sc.output_tokens, sc.endpoint)
        result = send_request(self, self.client, body, record, stage)
        self._after(result)

    def _after(self, result) -> None:
        """Pause after a refusal or a refused connection (never a flood of either)."""
        rt = self.rt
        if result.ok:
            self._backoff_s = 0.0
        elif result.error_kind == CONNECT_FAILED:
            # The server is down (killed, restarting): retry at a growing pause instead of
            # thousands of instant refusals a second, which would only burn the client's CPU.
            self._backoff_s = min(max(2 * self._backoff_s, CONNECT_BACKOFF_S[0]), CONNECT_BACKOFF_S[1])
            gevent.sleep(self._backoff_s)
        else:
            self._backoff_s = 0.0
        if not result.ok and is_client_refusal(result.error_kind, result.error_status) and not rt.fatal_sent:
            # a server that starts refusing mid-run is not hammered either: each user pauses
            gevent.sleep(rt.scenario.request.client_error_pause_s)
