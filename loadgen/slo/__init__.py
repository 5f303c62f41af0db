"""Service-level objectives, pure (no I/O, no clock).

``objectives`` (per-request verdicts against ``slo:`` thresholds, ``SloCounts`` that merge exactly,
per-stage attainment and goodput), ``limits`` (percentile limits of a stage and their named limit sets),
``early`` (closing a stage's window once its verdict is decided), ``search`` (the largest load
that meets the objectives, and summary.json's ``slo`` answer).

May import: ``loadgen.errors``, ``loadgen.phases``.
"""
