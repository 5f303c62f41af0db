"""One request streamed from an ``Ask``: the routine every sender calls.

The closed-loop user, the open-loop dispatcher, the KV guard's duration sample and the start
check's probe request all send through here: ``prepare`` builds the body from the ask
(``compat.build_body``); ``stream_prepared`` times a ``RequestRecord`` from ``sent_s`` (now, or an
open-loop arrival's scheduled time) and reads the stream to its end (``StreamClient.stream``);
``stream_ask`` is the two in one call. What each
sender does around it (statistics, Locust's stats, pauses) stays with the sender.

Every request carries an ``x-request-id`` header of its own (a uuid4 in hex), which vLLM and
SGLang take as the request's id in their logs (vLLM also in the stream's ``id``: ``cmpl-<it>``);
the result keeps it (``x_request_id``) with the stream's ``id`` (``response_id``), so
``requests.jsonl`` joins the server's logs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import NamedTuple

import gevent

from loadgen.stats.records import RequestRecord, RequestResult
from loadgen.wire.client import StreamClient
from loadgen.wire.compat import Compat, build_body
from loadgen.wire.endpoints import PATHS

REQUEST_ID_HEADER = "x-request-id"


class Streamed(NamedTuple):
    result: RequestResult
    nbytes: int  # response bytes read
    ask: object  # the Ask without its prompt (``Ask.sent``): the body carried it
    body: bytes  # what was sent (the start check adapts it after a refusal)


def prepare(scenario, model: str, compat: Compat, ask) -> tuple[bytes, object]:
    """The body of ``ask``'s request (``compat.build_body``) and ``ask.sent()``: while the request
    streams the body carries the prompt, so a sender that keeps its Ask should keep this one (at
    C=1024 a second copy of every prompt is megabytes)."""
    return build_body(scenario, model, ask.prompt, compat, ask.output_tokens), ask.sent()


def stream_prepared(client: StreamClient, scenario, body: bytes, ask, *, sent_s: float | None = None,
                    on_tokens: Callable[[int], None] | None = None,
                    on_cancel: Callable[[int], None] | None = None) -> tuple[RequestResult, int]:
    """Stream ``body`` (from ``prepare``) to the scenario's endpoint: (RequestResult, response bytes).

    ``sent_s``: when the request counts as sent (``time.perf_counter`` seconds; default: now).
    ``on_tokens(n)``: tokens as their chunks arrive. ``on_cancel(n)``: the greenlet was killed
    mid-stream (a stop, a drain timeout) after ``n`` tokens; the kill goes on."""
    record = RequestRecord(time.perf_counter() if sent_s is None else sent_s, ask.output_tokens, scenario.endpoint)
    request_id = uuid.uuid4().hex
    try:
        result, nbytes = client.stream(PATHS[scenario.endpoint], body, record, on_tokens=on_tokens,
                                       headers={REQUEST_ID_HEADER: request_id})
    except gevent.GreenletExit:
        if on_cancel is not None:
            on_cancel(record.chunk_tokens_seen)
        raise
    result.x_request_id, result.response_id = request_id, record.response_id
    return result, nbytes


def stream_ask(client: StreamClient, scenario, model: str, compat: Compat, ask, **kw) -> Streamed:
    """``prepare`` then ``stream_prepared`` (keyword arguments as there), for a sender that keeps
    nothing while the request streams."""
    body, ask = prepare(scenario, model, compat, ask)
    result, nbytes = stream_prepared(client, scenario, body, ask, **kw)
    return Streamed(result, nbytes, ask, body)
