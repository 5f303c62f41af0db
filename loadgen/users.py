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
import orjson
from gevent.lock import Semaphore
from locust import User, constant, task
from locust.exception import StopUser

from loadgen.client import StreamClient
from loadgen.errors import CONNECT_FAILED, NOT_OPENAI, RequestError, ServerUnusableError
from loadgen.preflight import not_openai_message
from loadgen.prompts import ChatPrompts, TokenIdPrompts, fit_word_count
from loadgen.records import RequestRecord

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
CONNECT_BACKOFF_S = (0.05, 1.0)  # first and longest pause after a refused connection
_user_numbers = itertools.count()
_calibration_lock = Semaphore()
_chat_words: dict[int, int] = {}


def _process_key(environment) -> int:
    """This process's place in the run (the worker index the master assigned; 0 locally), so
    prompts differ across workers yet repeat from run to run with the same seed and workers."""
    return int(getattr(environment.runner, "worker_index", 0) or 0)


def request_body(scenario, model: str, prompt) -> bytes:
    """The JSON body of one streaming request that forces exactly ``output_tokens`` tokens."""
    m = scenario.output_tokens
    body = {
        "model": model,
        "max_tokens": m,
        "min_tokens": m,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if scenario.request.continuous_usage:
        body["stream_options"]["continuous_usage_stats"] = True
    if scenario.endpoint == "chat":
        body["messages"] = prompt
    else:
        body["prompt"] = prompt
    body.update(scenario.request.extra_body)
    return orjson.dumps(body)


def token_id_prompts(scenario, key: tuple) -> TokenIdPrompts:
    """The /v1/completions prompts of one stream of requests, seeded by ``key``."""
    p = scenario.prompt
    return TokenIdPrompts(scenario.input_tokens, tuple(p.token_id_range), key, p.shared_prefix_tokens,
                          shared_seed=p.seed)


def chat_word_count(client: StreamClient, scenario, model: str) -> int:
    """Words per chat prompt so the server counts exactly ``input_tokens`` (cached per process)."""
    target = scenario.input_tokens
    with _calibration_lock:
        if target not in _chat_words:
            probe = ChatPrompts(1, (scenario.prompt.seed, 0xCA1))

            def measure(words: int) -> int:
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": probe.text(words)}],
                    "max_tokens": 1,
                    "stream": False,
                }
                return int(client.post_json(PATHS["chat"], body)["usage"]["prompt_tokens"])

            _chat_words[target], _ = fit_word_count(target, measure)
        return _chat_words[target]


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
    rt.collector.record_result(result, stage, sc.input_tokens, sc.output_tokens)
    user.environment.events.request.fire(
        request_type="POST",
        name=path,
        response_time=(result.e2e_s or 0.0) * 1000.0,
        response_length=nbytes,
        response=None,
        context={"stage": stage},
        exception=None if result.ok else RequestError(result.error_kind),
        start_time=start_wall,
        url=path,
    )
    if result.ok:
        rt.any_ok = True
    elif result.error_kind == NOT_OPENAI and not rt.any_ok:
        rt.fatal(ServerUnusableError(not_openai_message(user.host, f"POST {path}: {result.error_message}")))
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
        if sc.endpoint == "chat":
            self.prompts = None  # calibrated on first use (needs the model)
            self._seed_key = key
        else:
            self.prompts = token_id_prompts(sc, key)

    def on_stop(self) -> None:
        self.client.close()

    def _prepare(self) -> None:
        rt, sc = self.rt, self.rt.scenario
        try:
            self.model = rt.model(self.client)
            if self.prompts is None:
                self.prompts = ChatPrompts(chat_word_count(self.client, sc, self.model), self._seed_key)
        except (ServerUnusableError, RequestError) as exc:
            rt.fatal(exc)
            raise StopUser() from None  # the run stops with one clear line, not a traceback per user

    @task
    def generate(self) -> None:
        rt = self.rt
        if not rt.kind.sends_requests or rt.fatal_sent:  # a fatal error: the run is stopping, send no more
            gevent.sleep(0.2)
            return
        if self.model is None or self.prompts is None:
            self._prepare()
        sc = rt.scenario
        body = request_body(sc, self.model, self.prompts.next())
        stage = rt.measuring
        record = RequestRecord(time.perf_counter(), sc.output_tokens, sc.endpoint)
        result = send_request(self, self.client, body, record, stage)
        if result.ok:
            self._backoff_s = 0.0
        elif result.error_kind == CONNECT_FAILED:
            # The server is down (killed, restarting): retry at a growing pause instead of
            # thousands of instant refusals a second, which would only burn the client's CPU.
            self._backoff_s = min(max(2 * self._backoff_s, CONNECT_BACKOFF_S[0]), CONNECT_BACKOFF_S[1])
            gevent.sleep(self._backoff_s)
        else:
            self._backoff_s = 0.0
