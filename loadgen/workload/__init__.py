"""What to ask: pure request planning (no I/O, no clock).

``prompts`` (synthetic prompts of exactly N tokens, text or token IDs), ``lengths`` (length
distributions), ``dataset`` (dataset files and their shares), ``asks`` (``Ask``: one request as
planned; ``PromptMaker``, ``Workload``), ``conversation`` (multi-turn), ``trace`` (timestamped
replay), ``arrivals`` (open-loop arrival processes), ``mix`` (the KV guard's per-request figure), ``model_mix``
(a mix of models, each request's drawn by weight).

May import: ``loadgen.errors``, ``loadgen.phases``, ``loadgen.slo``, ``loadgen.stats``.
"""
