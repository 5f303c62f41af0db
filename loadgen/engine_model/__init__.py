"""The pure timing model of an LLM server, on any clock: what the simulator serves in real time and
what the what-if runs in virtual time.

``engine`` (one step clock shared by every request: KV cache, chunked prefill, preemption,
speculative decoding; ``EngineParams``), ``fixed`` (the known-answer model: every request on its
own schedule), ``prefix`` (automatic prefix caching), ``steploop`` (the one place that decides which
requests join which step and when chunks are delivered, whatever the clock), ``virtual`` (the
engine on a simulated clock: a whole sweep in CPU seconds).

Imports nothing from the rest of ``loadgen`` (``loadgen.APART``): ``loadgen.sim`` drives it over
HTTP, ``loadgen.whatif`` drives it on a virtual clock.
"""
