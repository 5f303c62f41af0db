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
from locust import User, constant, task
from locust.exception import StopUser

from loadgen.errors import CONNECT_FAILED, NOT_OPENAI, RequestError, ServerUnusableError, is_client_refusal
from loadgen.run.prompt_source import prompt_source
from loadgen.server.start_check import not_openai_message
from loadgen.stats.failures import LocustFailure, locust_name
from loadgen.wire.client import StreamClient
from loadgen.wire.compat import refusal_line
from loadgen.wire.endpoints import PATHS
from loadgen.wire.exchange import prepare, stream_prepared
from loadgen.workload.model_mix import ModelDraw

_user_numbers = itertools.count()


def _process_key(environment) -> int:
    """This process's place in the run (the worker index the master assigned; 0 locally), so
    prompts differ across workers yet repeat from run to run with the same seed and workers."""
    return int(getattr(environment.runner, "worker_index", 0) or 0)


def send_request(user, client: StreamClient, body: bytes, ask, stage: int | None, sent_s: float | None = None,
                 model: str | None = None, replica: str | None = None):
    """Send ``body`` and ``ask`` (``loadgen.wire.exchange.prepare``), account for it (in flight, statistics,
    Locust's stats) and return its RequestResult. ``sent_s``: when it counts as sent: now (closed
    loop) or its scheduled time (open loop). ``model``: the model it asked for, with a mix of
    models (counted in that model's statistics too); None: one model. ``replica``: the replica
    ``client`` talks to, with hosts spread by the client; behind a router that names its engine,
    the response's header says (``Targets.served_by``). Shared by the closed-loop user and the
    open-loop dispatcher."""
    rt, path = user.rt, user.path
    sc = rt.scenario

    named: list[str | None] = []  # behind a router: the engine, read once its response's header is in

    def served() -> str | None:
        if replica is not None or named:
            return replica if replica is not None else named[0]
        who = rt.targets.served_by(client.upstream)
        if client.upstream is not None:
            named.append(who)  # fixed for this request: not parsed again for every chunk
        return who

    rt.request_started(stage)
    start_wall, start_perf = time.time(), time.perf_counter()
    result = None
    plain = model is None and not rt.targets.per_replica
    on_tokens = rt.on_tokens if plain else lambda n: rt.on_tokens(n, model, served())
    try:
        result, nbytes = stream_prepared(
            client, sc, body, ask, sent_s=sent_s, on_tokens=on_tokens,
            on_cancel=lambda tokens: rt.collector.record_cancelled(stage, tokens, model, served()))
    finally:
        who = served()
        rt.request_finished(stage, ok=result is not None and result.ok, model=model, replica=who)
    if not result.ok:
        result.error_message = rt.redact(result.error_message)  # a server may echo the key back
    turn = ask.turn if sc.workload.turns > 1 else None
    rt.collector.record_result(result, stage, ask.input_tokens, ask.output_tokens, sc.slo, turn=turn, model=model,
                               replica=who)
    # sent: now, or an open-loop arrival's scheduled time (perf_counter), on the wall clock
    rt.export_request(result, stage, ask.input_tokens, turn=turn, model=model, replica=who,
                      sent_unix_s=start_wall - (start_perf - sent_s if sent_s is not None else 0.0))
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


class StreamUser(User):
    """What every sender of this package shares: its first client, its prompts, model discovery and
    chat calibration. It declares no task: Locust merges a base class's tasks into every subclass's
    (``tasks = [...]`` in a subclass adds to them, it does not replace them), so a task here would
    also run in the open-loop dispatcher, ``loadgen.locust_face.open_loop.RateUser``."""

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        rt = self.environment.llm
        sc = rt.scenario
        self.rt = rt
        self.client = rt.stream_client(self.host)
        self.replica_clients: dict[int, StreamClient] = {}  # hosts spread by the client: one per replica used
        self.path = PATHS[sc.endpoint]
        key = (sc.prompt.seed, _process_key(self.environment), next(_user_numbers))
        self.model = None
        self.prompts = None  # on first use: needs the model and what the server accepts (rt.compat)
        self._seed_key = key
        # a mix of models: this sender's seeded draw (loadgen.workload.model_mix), one model a request
        self.model_draw = ModelDraw(sc.model_mix, key) if sc.model_mix is not None else None

    def next_model(self) -> tuple[str, str | None]:
        """(the model the next request sends, the model it is counted under: None without a mix)."""
        if self.model_draw is None:
            return self.model, None
        name = self.model_draw.next()
        return name, name

    def on_stop(self) -> None:
        self.client.close()
        for client in self.replica_clients.values():
            client.close()

    def replica_client(self, index: int | None) -> StreamClient:
        """The client to replica ``index`` (``Targets.pick``; None: the one host's)."""
        if index is None:
            return self.client
        client = self.replica_clients.get(index)
        if client is None:
            client = self.replica_clients[index] = self.rt.stream_client(self.rt.targets.root(index, self.host))
        return client

    def _prepare(self) -> None:
        rt = self.rt
        try:
            self.model = rt.model(self.client)
            if self.prompts is None:
                self.prompts = prompt_source(rt, self.client, self.model, self._seed_key)
        except (ServerUnusableError, RequestError) as exc:
            rt.fatal(exc)
            raise StopUser() from None  # the run stops with one clear line, not a traceback per user


class LLMUser(StreamUser):
    """One closed-loop streaming client of an OpenAI-compatible server."""

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
        model, counted_as = self.next_model()
        body, ask = prepare(rt.scenario, model, rt.compat, self.prompts.next())
        index, replica = rt.targets.pick()
        try:
            result = send_request(self, self.replica_client(index), body, ask, rt.measuring, model=counted_as,
                                  replica=replica)
        finally:
            rt.targets.done(index)
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
