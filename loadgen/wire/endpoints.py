"""The server paths we call, in one place (the request bodies are ``loadgen.wire.compat.build_body``).

``PATHS`` maps the scenario's ``endpoint`` to its streaming path (declared with the names in
``loadgen.config.schema``); ``MODELS_PATH`` is the start
check's first question; ``METRICS_PATH``, ``SERVER_INFO_PATH`` and ``PROPS_PATH`` live at the
server's root (not under ``/v1``): Prometheus text (vLLM, SGLang, llama.cpp), SGLang's server info
and llama.cpp's properties (its slots).
"""

from loadgen.config.schema import ENDPOINT_PATHS

PATHS = ENDPOINT_PATHS
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
SERVER_INFO_PATH = "/get_server_info"
PROPS_PATH = "/props"
