"""The run's control on one process.

``plan`` (``SweepPlan``: the pure stage state machine), ``kv_guard`` (the KV projection and the
pre-stage decision), ``stage_guard`` (that decision as the run applies it), ``session`` (the run as
its owner sees it: start check, events, rows, results on every stop path), ``results`` (stage rows
and summary.json), ``runtime`` (one process's state), ``console``, ``health`` (the client's own
self-check), ``fail_fast`` (stop a run whose first requests are all refused), ``unstaged`` (requests
sent outside the stages), ``prompt_source`` (the asks one sender makes), ``exporter_feed``.

May import every layer below: ``errors``, ``phases``, ``slo``, ``stats``, ``workload``, ``config``,
``wire``, ``server``, ``analysis``, ``report``, ``export``, ``repeat``.
"""
