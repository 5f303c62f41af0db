"""Built-in LLM server simulator (``python -m loadgen.sim``): OpenAI-compatible HTTP/SSE over timing models.

Layers, bottom up: pure timing models (``engine``: one shared step clock with KV cache, chunked
prefill, preemption and speculative decoding; ``fixed``: known-answer per-request schedule), the
``runner`` that drives a model in real time, ``stream``/``wire`` that put chunks on sockets, and
``server`` (HTTP routes) with ``metrics`` (vLLM- or SGLang-named ``/metrics``). It imports nothing
from the rest of ``loadgen``, so it cannot hide a client bug.
"""
