"""The sweep's LoadTestShape, as the locustfile sees it (the logic: ``loadgen.locust_face.shape``).

What it runs, stage by stage (``stages:`` in the scenario, ``docs/sweep.md``):

- loads 1, 2, 4, ... (``stages.start`` x ``stages.factor`` up to ``stages.max``, or ``stages.list``;
  with ``arrival: poisson`` request rates instead of users);
- each stage: a warmup (``stages.warmup_s``, then until the first requests finished), a measurement
  window (``stages.window_s``) whose requests make the stage's row, and, in an SLO run or with
  ``stages.isolate``, a drain before the next stage;
- before each stage, the KV guard: concurrency x (input + output tokens) against the server's KV
  capacity; a stage that would not fit is not run, and the run stops with the reason;
- after the sweep, the SLO search (``slo.search``) bisects between the last passing and the first
  failing stage; ``slo.early_stop`` closes a stage's window once its verdict is decided.
"""

from loadgen.locust_face.shape import SweepShape

__all__ = ["SweepShape"]
