"""What came back, as numbers: pure (no I/O, no clock).

``records`` turns one stream's SSE payloads into a ``RequestResult`` (TTFT, ITL, TPOT, tokens);
``stage_stats`` sums results per stage (``StageStats``, the process's ``Collector``) with ``hist``
(log histograms that merge exactly); ``metrics`` declares every stage metric once; ``failures`` keeps the server's reasons bounded; ``inflight`` meters
requests in flight; ``stage_load`` spells a stage's load (``C=8``, ``8 req/s``); ``flags`` declares
the stage markers.

May import: ``loadgen.errors``, ``loadgen.phases``, ``loadgen.slo`` (requests judged against
objectives).
"""
