"""One exception tree for llm-loadgen, and the stable failure categories of a request.

    LoadgenError                 root of everything we raise on purpose
    ├── ConfigError              a user mistake in a scenario file or option -> exit code 2, one line
    ├── ServerUnusableError      the target cannot be load-tested (refused, not OpenAI-compatible)
    └── RequestError             one LLM request failed; ``kind`` is one of FAILURE_KINDS

Transport errors (socket, HTTP parser) are translated into RequestError in exactly one place:
``loadgen.client``. Everything above the client sees only these types.
"""

from __future__ import annotations

# Exit codes of a run. Documented in the README; tests pin them.
EXIT_OK = 0
EXIT_FAILURES = 1  # Locust's own: the run completed but some requests failed
EXIT_CONFIG = 2  # bad scenario/option: one line on stderr naming key, value and fix
EXIT_GUARD_ABORT = 3  # the KV guard refused a stage; completed stages are written
EXIT_SERVER_UNUSABLE = 4  # connection refused at start, or not an OpenAI-compatible server
EXIT_INTERNAL = 5  # a bug of ours stopped the sweep; completed stages are written
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM; results gathered so far are written

# Stable failure categories. They are Locust stats error names, exporter label values and
# summary.json keys, so renaming one is a breaking change.
HTTP_4XX = "http_4xx"  # 4xx other than 429, before the stream
HTTP_5XX = "http_5xx"  # 5xx other than 503, before the stream
OVERLOAD_429 = "overload_429"  # rate limited: overload, counted apart from errors
OVERLOAD_503 = "overload_503"  # queue full (SGLang --max-queued-requests): overload
STREAM_ERROR = "stream_error"  # HTTP 200, then an SSE event carrying {"error": {...}}
ABORTED = "aborted"  # finish_reason == "abort" (SGLang)
CONNECTION_RESET = "connection_reset"  # the connection closed or reset mid-stream
CONNECT_FAILED = "connect_failed"  # could not connect (refused, unreachable)
READ_TIMEOUT = "read_timeout"  # no bytes for read_timeout_s (a stall)
MALFORMED_CHUNK = "malformed_chunk"  # invalid SSE framing or invalid JSON in a data event
EMPTY_STREAM = "empty_stream"  # 200 and a stream that ended without a single content chunk
TRUNCATED = "truncated"  # stream ended with neither a finish reason nor [DONE]
NOT_OPENAI = "not_openai"  # 200 but not an SSE completion stream (wrong content, wrong shape)

FAILURE_KINDS = (
    HTTP_4XX,
    HTTP_5XX,
    OVERLOAD_429,
    OVERLOAD_503,
    STREAM_ERROR,
    ABORTED,
    CONNECTION_RESET,
    CONNECT_FAILED,
    READ_TIMEOUT,
    MALFORMED_CHUNK,
    EMPTY_STREAM,
    TRUNCATED,
    NOT_OPENAI,
)
OVERLOAD_KINDS = frozenset({OVERLOAD_429, OVERLOAD_503})


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
