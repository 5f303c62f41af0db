"""The server paths we call, in one place (the request bodies are ``loadgen.wire.compat.build_body``).

``PATHS`` maps the scenario's ``endpoint`` to its streaming path; ``MODELS_PATH`` is the start
check's first question; ``METRICS_PATH``, ``SERVER_INFO_PATH`` and ``PROPS_PATH`` live at the
server's root (not under ``/v1``): Prometheus text (vLLM, SGLang, llama.cpp), SGLang's server info
and llama.cpp's properties (its slots).
"""

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
SERVER_INFO_PATH = "/get_server_info"
PROPS_PATH = "/props"
