"""The simulator's HTTP server: routes, connection handling, and the glue to the timing model.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (stream and non-stream),
``GET /v1/models`` (with ``max_model_len``), ``GET /health``, ``POST /tokenize`` (and
``/v1/tokenize``), ``GET /metrics``; SGLang flavor also ``GET /get_server_info`` and
``/server_info``. Without ``served_models`` the model is not checked against ``/v1/models``: any
``model`` is served; with it, a request for a model it does not list is answered 404 as vLLM does.
With a TLS context (``loadgen.sim.tls``) every connection is TLS: ``https://``.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
import socket
import time

import gevent
import orjson
from gevent.server import StreamServer
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from loadgen.engine_model.engine import Engine, QueueFull, SimRequest
from loadgen.engine_model.fixed import FixedSchedule
from loadgen.engine_model.prefix import block_hashes
from loadgen.sim import framing, strict
from loadgen.sim import request as genreq
from loadgen.sim.config import SimConfig, required_header
from loadgen.sim.faults import PRE_STREAM, FaultPlan
from loadgen.sim.httpio import HTTPError, HTTPRequest, RequestReader
from loadgen.sim.metrics import SimCollector, SimMetrics, mean_accept_length
from loadgen.sim.runner import EngineRunner, FixedRunner
from loadgen.sim.stream import KEEP, Stream
from loadgen.sim.tls import handshake
from loadgen.sim.tokens import WORD_BYTES, generated_text, messages_text, text_token_ids

log = logging.getLogger("loadgen.sim")
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # an X-Request-Id the simulator echoes in its ids
FAULT_STATUS = {"http_500": 500, "http_429": 429, "http_503": 503}


class SimServer:
    def __init__(self, config: SimConfig):
        self.config = config
        self.metrics = SimMetrics(config.flavor)
        if config.timing == "engine":
            self.model = Engine(config.engine_params())
            self.runner = EngineRunner(self.model, config.time_scale, self._deliver)
            self.runner.kv_leak_per_s = config.drift_kv_leak_tokens_per_h / 3600
            self.runner.kv_lost_max = max(config.kv_tokens - config.max_model_len - config.block_size, 0)
        else:
            self.model = FixedSchedule(config.ttft_ms / 1e3, config.itl_ms / 1e3, config.tokens_per_chunk,
                                       config.drift_prefill_pct_per_h / 100 / 3600,
                                       config.drift_decode_pct_per_h / 100 / 3600)
            self.runner = FixedRunner(self.model, config.time_scale, self._deliver)
        self.faults = FaultPlan(config.faults, config.seed)
        self._rng = random.Random(config.seed)  # early EOS and text offsets
        self._ids = itertools.count(1)
        self.created = int(time.time())
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SimCollector(self))
        self._server: StreamServer | None = None
        self._tls = None  # the server side's ssl.SSLContext: https://

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0, tls=None) -> int:
        """Listen and start the runner; returns the bound port. ``tls``: serve TLS with this
        server-side context (``loadgen.sim.tls.server_context``)."""
        self._tls = tls
        self._server = StreamServer((host, port), self.handle, backlog=4096)
        self._server.start()
        self.runner.start()
        return self._server.server_port

    def stop(self) -> None:
        self.runner.stop()
        if self._server is not None:
            self._server.stop(timeout=1)

    def _deliver(self, events: list[tuple[SimRequest, int, bool]], now: float) -> None:
        for req, n, done in events:
            try:
                req.sink.emit(n, done, now)
            except Exception:  # one broken stream must not take the runner down
                log.exception("stream emit failed; aborting that request")
                self.runner.abort(req)

    # -- connections -------------------------------------------------------------------------------
    def handle(self, sock, addr) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None and (sock := handshake(sock, self._tls, self.config.idle_timeout_s)) is None:
            return
        reader = RequestReader(sock)
        try:
            while True:
                sock.settimeout(self.config.idle_timeout_s)
                try:
                    req = reader.read()
                except HTTPError as exc:
                    sock.sendall(framing.json_response(exc.status, framing.error_obj(exc.status, exc.message), False))
                    return
                if req is None:
                    return
                sock.settimeout(None)
                if not self._route(req, sock) or not req.keep_alive:
                    return
        except OSError:
            return  # client went away; nothing to answer
        finally:
            sock.close()

    def _route(self, req: HTTPRequest, sock) -> bool:
        """Answer one request; False when the connection must close."""
        path, method = req.path.rstrip("/") or "/", req.method
        if (refused := self._gateway_refusal(req, method, path)) is not None:
            sock.sendall(framing.json_response(*refused, req.keep_alive))
            return True
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            return self._generate(req, sock, chat=path.endswith("chat/completions"))
        routes = {
            ("GET", "/health"): lambda: (200, None),
            ("GET", "/v1/models"): self._models,
            ("GET", "/version"): lambda: (200, {"version": "llmsim-0.1.0"}),
            ("POST", "/tokenize"): lambda: self._tokenize(req.body),
            ("POST", "/v1/tokenize"): lambda: self._tokenize(req.body),
        }
        if self.config.flavor == "sglang":
            routes[("GET", "/get_server_info")] = routes[("GET", "/server_info")] = self._server_info
        if (method, path) == ("GET", "/metrics"):
            body = generate_latest(self.registry)
            sock.sendall(framing.head(200, CONTENT_TYPE_LATEST.encode(), len(body), req.keep_alive) + body)
            return True
        handler = routes.get((method, path))
        if handler is None:
            known = {p for _, p in routes} | {"/metrics", "/v1/completions", "/v1/chat/completions"}
            status = 405 if path in known else 404
            sock.sendall(framing.json_response(status, framing.error_obj(status, f"{method} {path} not found"),
                                            req.keep_alive))
            return True
        status, obj = handler()
        if obj is None:
            sock.sendall(framing.head(status, b"text/plain", 0, req.keep_alive))
        else:
            sock.sendall(framing.json_response(status, obj, req.keep_alive))
        return True

    def _gateway_refusal(self, req: HTTPRequest, method: str, path: str) -> tuple[int, dict] | None:
        """``require_header``: a gateway's answer to a request without its header (401) or with
        another value (403); None lets the request through (GET /health always)."""
        required = required_header(self.config)
        if required is None or (method, path) == ("GET", "/health"):
            return None
        name, value = required
        got = req.headers.get(name)
        if got == value:
            return None
        status = 401 if got is None else 403
        problem = "missing" if got is None else "not accepted"
        return status, framing.error_obj(status, f"gateway: header {name} {problem}")

    def _models(self) -> tuple[int, dict]:
        c = self.config
        cards = []
        for name in c.served_names():
            card = {"id": name, "object": "model", "created": self.created, "owned_by": c.flavor,
                    "root": name, "parent": None, "max_model_len": c.max_model_len}
            if not c.advertise_max_model_len:
                del card["max_model_len"]
            cards.append(card)
        return 200, {"object": "list", "data": cards}

    def _answer_model(self, p: genreq.GenParams) -> str:
        """The model a response names: the one asked for, when served_models lists it; else ``model``."""
        return p.model if self.config.served_models and p.model else self.config.model

    def _server_info(self) -> tuple[int, dict]:
        c = self.config
        return 200, {"model_path": c.model, "served_model_name": c.model, "context_length": c.max_model_len,
                     "max_total_num_tokens": c.kv_tokens, "max_running_requests": c.max_running,
                     "max_queued_requests": c.max_queued or None, "page_size": c.block_size,
                     "version": "llmsim-0.1.0",
                     # as SGLang's own benchmark reads it (speculative decoding: the mean accept length)
                     "internal_states": [{"avg_spec_accept_length": mean_accept_length(self.model.stats)}]}

    def _tokenize(self, body: bytes) -> tuple[int, dict]:
        try:
            obj = orjson.loads(body)
            if isinstance(obj, dict) and "messages" in obj:
                tokens = text_token_ids(messages_text(obj["messages"]))
            elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
                tokens = text_token_ids(obj["prompt"])
            elif isinstance(obj, dict) and isinstance(obj.get("prompt"), list):
                tokens = list(obj["prompt"])
            else:
                raise ValueError("body must be {\"prompt\": text or token IDs} or {\"messages\": [...]}")
        except (ValueError, orjson.JSONDecodeError) as exc:
            return 400, framing.error_obj(400, str(exc))
        return 200, {"count": len(tokens), "max_model_len": self.config.max_model_len, "tokens": tokens}

    # -- generation --------------------------------------------------------------------------------
    def _generate(self, http: HTTPRequest, sock, chat: bool) -> bool:
        t_arrival = time.perf_counter()
        cfg, keep = self.config, http.keep_alive
        refused = self._strict(http.body, chat)
        if refused is not None:
            self.metrics.rejected["strict"] += 1
            if refused.in_stream:
                sock.sendall(framing.sse_error_response(refused.body, keep))
            else:
                sock.sendall(framing.json_response(refused.status, refused.body, keep))
            return True
        try:
            p = genreq.parse(http.body, chat, cfg.max_model_len, cfg.default_max_tokens,
                             want_ids=cfg.timing == "engine" and cfg.prefix_cache_tokens > 0)
        except genreq.BadRequest as exc:
            self.metrics.rejected["bad_request"] += 1
            sock.sendall(framing.json_response(400, framing.error_obj(400, str(exc)), keep))
            return True
        if cfg.served_models and p.model not in cfg.served_names():  # as vLLM answers an unknown model
            self.metrics.rejected["unknown_model"] += 1
            body = framing.error_obj(404, f"The model `{p.model}` does not exist.")
            sock.sendall(framing.json_response(404, body, keep))
            return True
        output, finish = self._output_length(p)
        fault = self.faults.draw(output)
        if fault is not None and fault.kind in PRE_STREAM:
            self.metrics.faults[fault.kind] += 1
            status = FAULT_STATUS[fault.kind]
            msg = f"simulated {status} (fault {fault.kind})"
            sock.sendall(framing.json_response(status, framing.error_obj(status, msg), keep))
            return True
        # as vLLM names a request: its X-Request-Id header when the client sent one (kept only if it
        # is plain: the stream's bytes carry it unescaped), else an id of its own
        given = http.headers.get("x-request-id", "")
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{given if _PLAIN_ID.fullmatch(given) else format(next(self._ids), '016x')}"
        fmt = None
        if p.stream:
            thinking = min(cfg.reasoning_tokens, output) if chat and p.thinking else 0
            fmt = framing.StreamFormat(chat=chat, rid=rid, created=int(time.time()), model=self._answer_model(p),
                                    prompt_tokens=p.prompt_tokens, flavor=cfg.flavor,
                                    include_usage=p.include_usage, continuous_usage=p.continuous_usage,
                                    reasoning_key=cfg.reasoning_key(), reasoning_tokens=thinking,
                                    reasoning_usage=bool(cfg.reasoning_usage))
        sim = SimRequest(p.prompt_tokens, output)
        if p.prompt_ids is not None:
            sim.prefix_hashes = block_hashes(p.prompt_ids, cfg.prefix_block_tokens)
        stream = Stream(self, sock, sim, fmt, fault, finish, self._rng.randrange(len(WORD_BYTES)), t_arrival)
        sim.sink = stream
        try:
            self.runner.submit(sim)
        except QueueFull as exc:
            self.metrics.rejected["queue_full"] += 1
            sock.sendall(framing.json_response(503, framing.error_obj(503, f"server overloaded: {exc}"), keep))
            return True
        try:
            return self._respond(stream, sock, keep, rid, chat, p, fmt)
        finally:
            if stream.end is None:  # this greenlet died (client gone, server stopping)
                self.runner.abort(sim)

    def _strict(self, body: bytes, chat: bool) -> strict.Refusal | None:
        cfg = self.config
        if not (cfg.reject_fields or cfg.prompt_token_ids == "reject" or cfg.vocab_size):
            return None
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None  # parse() answers it
        return strict.refusal(obj, chat, cfg.reject_fields, cfg.prompt_token_ids, cfg.vocab_size,
                              cfg.flavor) if isinstance(obj, dict) else None

    def _respond(self, stream: Stream, sock, keep: bool, rid: str, chat: bool, p, fmt) -> bool:
        if fmt is not None:
            stream.blocked = True  # the runner queues chunks until the head is out
            head = framing.head(200, b"text/event-stream; charset=utf-8", None, keep)
            sock.sendall(head + (framing.http_chunk(fmt.role_event()) if chat else b""))
            stream.flush()
            return stream.wait_done(self.config.stall_max_s) == KEEP
        end = stream.wait_done(self.config.stall_max_s)
        if end != KEEP:
            return False
        if stream.delay_s:  # --network-delay-ms: the body reaches the client that much later
            gevent.sleep(stream.delay_s)
        text = generated_text(stream.text_offset, 0, stream.sent).decode()
        body = framing.completion_obj(chat=chat, rid=rid, created=int(time.time()), model=self._answer_model(p),
                                   text=text, finish=stream.finish_reason.decode(),
                                   prompt=p.prompt_tokens, completion=stream.sent)
        sock.sendall(framing.json_response(200, body, keep))
        return True

    def _output_length(self, p: genreq.GenParams) -> tuple[int, bytes]:
        """Tokens to generate and the finish reason: exact unless EOS may come early."""
        exact = p.ignore_eos or p.min_tokens >= p.max_tokens
        if exact or self.config.eos_prob <= 0 or self._rng.random() >= self.config.eos_prob:
            return p.max_tokens, b"length"
        n = self._rng.randint(max(1, p.min_tokens), p.max_tokens)
        return n, (b"length" if n == p.max_tokens else b"stop")

