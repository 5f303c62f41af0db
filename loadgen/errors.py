"""One exception tree for llm-loadgen, and the stable failure categories of a request.

    LoadgenError                 root of everything we raise on purpose
    ├── ConfigError              a user mistake in a scenario file or option -> exit code 2, one line
    ├── ServerUnusableError      the target cannot be load-tested (refused, not OpenAI-compatible)
    └── RequestError             one LLM request failed; ``kind`` is one of FAILURE_KINDS
        └── DiagnosedConnectFailure  a connect failure whose cause is known; ``message`` holds the fix
            ├── SchemeMismatch       the server speaks plain HTTP behind https://, or TLS behind http://
            └── CertificateRejected  the server's TLS certificate did not verify (loadgen.wire.tls says why)

Transport errors (socket, HTTP parser) are translated into RequestError in exactly one place:
``loadgen.wire.client``. Everything above the client sees only these types.
"""

from __future__ import annotations

from dataclasses import dataclass

# Exit codes of a run. Documented in the README and docs/sweep.md; tests pin them.
EXIT_OK = 0
EXIT_FAILURES = 1  # Locust's own: the run completed but some requests failed
EXIT_CONFIG = 2  # bad scenario/option: one line on stderr naming key, value and fix
EXIT_GUARD_ABORT = 3  # the KV guard refused a stage; completed stages are written
EXIT_SERVER_UNUSABLE = 4  # connection refused at start, or not an OpenAI-compatible server
EXIT_INTERNAL = 5  # a bug of ours stopped the sweep; completed stages are written
EXIT_REGRESSION = 6  # report compare --fail-on: the candidate regressed beyond a threshold (loadgen.repeat.gate)
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM; results gathered so far are written

# summary.json's run.stop_reason, as the console's last line says it
STOP_WORDS = {
    "completed": "completed",
    "interrupted": "interrupted",
    "guard_abort": "stopped by the KV guard (the next stage does not fit)",
    "server_over_capacity": "stopped: the server was over capacity (guard.abort_on_over_capacity)",
    "error": "stopped by the error above",
}

# Stable failure categories. They are Locust stats error names, exporter label values and
# summary.json keys, so renaming one is a breaking change.
HTTP_4XX = "http_4xx"
HTTP_5XX = "http_5xx"
OVERLOAD_429 = "overload_429"
OVERLOAD_503 = "overload_503"
STREAM_ERROR = "stream_error"
ABORTED = "aborted"
CONNECTION_RESET = "connection_reset"
CONNECT_FAILED = "connect_failed"
READ_TIMEOUT = "read_timeout"
MALFORMED_CHUNK = "malformed_chunk"
EMPTY_STREAM = "empty_stream"
TRUNCATED = "truncated"
NOT_OPENAI = "not_openai"


@dataclass(frozen=True)
class FailureKind:
    """One failure category: its stable ``key``, the ``short`` name of the console table's errors
    column (``"5 429:3 reset:2"``), and whether it is ``overload`` (the server refusing work it
    has no room for, counted apart from errors by the exporter's ``outcome`` label)."""

    key: str
    short: str
    meaning: str
    overload: bool = False


# The one declaration of the failure kinds; FAILURE_KINDS, OVERLOAD_KINDS and short names derive.
KINDS = (
    FailureKind(HTTP_4XX, "4xx", "4xx other than 429, before the stream"),
    FailureKind(HTTP_5XX, "5xx", "5xx other than 503, before the stream"),
    FailureKind(OVERLOAD_429, "429", "rate limited", overload=True),
    FailureKind(OVERLOAD_503, "503", "queue full (SGLang --max-queued-requests)", overload=True),
    FailureKind(STREAM_ERROR, "stream", "HTTP 200, then an SSE event carrying {\"error\": {...}}"),
    FailureKind(ABORTED, "abort", 'finish_reason == "abort" (SGLang)'),
    FailureKind(CONNECTION_RESET, "reset", "the connection closed or reset mid-stream"),
    FailureKind(CONNECT_FAILED, "connect", "could not connect (refused, unreachable)"),
    FailureKind(READ_TIMEOUT, "timeout", "no bytes for read_timeout_s (a stall)"),
    FailureKind(MALFORMED_CHUNK, "malformed", "invalid SSE framing or invalid JSON in a data event"),
    FailureKind(EMPTY_STREAM, "empty", "200 and a stream that ended without a content chunk or tokens in its usage"),
    FailureKind(TRUNCATED, "trunc", "stream ended with neither a finish reason nor [DONE]"),
    FailureKind(NOT_OPENAI, "not_openai", "200 but not an SSE completion stream (wrong content, wrong shape)"),
)
FAILURE_KINDS = tuple(k.key for k in KINDS)
OVERLOAD_KINDS = frozenset(k.key for k in KINDS if k.overload)
_SHORT = {k.key: k.short for k in KINDS}


def short_kind(kind: str) -> str:
    """The console table's short name of a failure kind; an unknown kind is shown whole."""
    return _SHORT.get(kind, kind)


class LoadgenError(Exception):
    """Root of every error llm-loadgen raises on purpose."""


class ConfigError(LoadgenError):
    """A user mistake in a scenario file or command-line option.

    The message is one line: the key, the bad value, and how to fix it, e.g.
    ``stages.factor must be > 1, got 0.5 (use 2 to double concurrency each stage)``.
    """

    def __init__(self, key: str, value: object, problem: str, fix: str = ""):
        self.key = key
        self.value = value
        self.problem = problem
        self.fix = fix
        text = f"{key}: {problem}, got {value!r}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class ServerUnusableError(LoadgenError):
    """The target server cannot be load-tested at all (connection refused, not OpenAI-compatible).

    ``kind`` is the failure category that showed it (e.g. CONNECT_FAILED), ``detail`` its text.
    """

    def __init__(self, message: str, kind: str = NOT_OPENAI, detail: str = ""):
        self.kind = kind
        self.detail = detail
        super().__init__(message)


class RequestError(LoadgenError):
    """One LLM request failed. ``kind`` is one of FAILURE_KINDS; the message never holds secrets.

    ``status`` is the HTTP status when the server answered one other than 200 (None otherwise):
    callers that care which status (401/403 at the start check) read it here, not in the text.
    """

    def __init__(self, kind: str, message: str = "", status: int | None = None):
        assert kind in FAILURE_KINDS, kind
        self.kind = kind
        self.message = message
        self.status = status
        super().__init__(f"{kind}: {message}" if message else kind)


class DiagnosedConnectFailure(RequestError):
    """A CONNECT_FAILED whose cause is known (the server runs, but not as --host says): ``message``
    says what was found and the fix, so no generic advice ("is the server running?") is added."""

    def __init__(self, message: str):
        super().__init__(CONNECT_FAILED, message)


class SchemeMismatch(DiagnosedConnectFailure):
    """The server speaks the other protocol than --host's scheme says (the start check finds it):
    ``spoken`` is "http" (an https:// URL for a plain-HTTP server) or "https"."""

    def __init__(self, spoken: str, message: str):
        super().__init__(message)
        self.spoken = spoken


class CertificateRejected(DiagnosedConnectFailure):
    """The server's TLS certificate did not verify (``loadgen.wire.tls.rejection`` says why and the fix)."""


NOT_CLIENT_ERRORS = frozenset({408, 429})  # a timeout and a rate limit: overload, not a refusal


def is_client_refusal(kind: str, status: int | None) -> bool:
    """A failure that repeating will not fix: 4xx other than 408/429, or a non-OpenAI answer."""
    if kind == NOT_OPENAI:
        return True
    return status is not None and 400 <= status < 500 and status not in NOT_CLIENT_ERRORS
