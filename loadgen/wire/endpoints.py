"""The server paths we call, in one place (the request bodies are ``loadgen.wire.compat.build_body``).

``PATHS`` maps the scenario's ``endpoint`` to its streaming path (declared with the names in
``loadgen.config.schema``); ``MODELS_PATH`` is the start
check's first question; ``METRICS_PATH``, ``SERVER_INFO_PATH`` and ``PROPS_PATH`` live at the
server's root (not under ``/v1``): Prometheus text (vLLM, SGLang, llama.cpp), SGLang's server info
and llama.cpp's properties (its slots). ``server_root`` is the one reading of ``--host``: every
client and the start check hang these paths under it.
"""

from urllib.parse import urlsplit

from loadgen.config.schema import ENDPOINT_PATHS

PATHS = ENDPOINT_PATHS
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
SERVER_INFO_PATH = "/get_server_info"
PROPS_PATH = "/props"


def server_root(host: str) -> str:
    """``--host`` as users paste it -> the root every path above hangs under: the server's root
    (``http://h:p``), an OpenAI base URL (``http://h:p/v1``, ``/v1/``) or a gateway's prefix before
    it (``http://h:p/serving/llama/v1``) all give the URL without the trailing ``/`` and ``/v1``.
    API paths are then root + ``/v1/...``; ``/metrics`` and the server's info root + their path
    (behind a gateway prefix, the prefix's root: where a route to one server exposes them)."""
    root = host.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def host_reading(host: str, endpoint_path: str) -> str | None:
    """What ``--host`` was read as, in one line to say at the start; None for a server's root as
    is (nothing to explain). ``endpoint_path``: the run's API path (``PATHS[endpoint]``)."""
    root = server_root(host)
    prefix = urlsplit(root).path
    if not prefix and host.rstrip("/") == root:
        return None
    base = f"{root}/v1"
    given_base = host.rstrip("/").endswith("/v1")
    behind = f" behind the path prefix {prefix}" if prefix else ""
    read_as = f"the OpenAI base URL {base}{behind}" if given_base else f"the server root {root}{behind} (OpenAI base URL {base})"
    return (f"--host {host} read as {read_as}: API paths {prefix}{endpoint_path} and {prefix}{MODELS_PATH}; "
            f"{METRICS_PATH} and the server's info at {root}")
