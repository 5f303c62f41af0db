"""Built-in LLM server simulator (``python -m loadgen.sim``): OpenAI-compatible HTTP/SSE over the
engine model (``loadgen.engine_model``).

Bottom up: ``config`` (defaults <- preset YAML <- options), the ``runner`` that drives a timing
model in real time, ``request`` (parsing a body), ``stream``/``wire`` that put chunks on sockets,
``server`` (HTTP routes) with ``metrics`` (vLLM- or SGLang-named ``/metrics``), ``faults``, ``strict``
(refusals of stricter servers), ``tls``, ``tokens`` (its tokenizer rule), ``launch`` (start it as a
subprocess). It imports nothing from the client side of ``loadgen`` (only ``loadgen.engine_model``),
so it cannot hide a client bug.
"""
