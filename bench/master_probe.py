"""The real locustfile, plus a probe of what worker reports cost the master (bench/many_workers.py).

Locust fires ``worker_report`` on the master once per worker report (every 3 s per worker, and once
at its quit); the listeners run in the order they were added:

1. ``_before``     added when this file is imported (before Locust creates the master runner)
2. Locust's own    added with the master runner (its request stats merge)
3. ``_mid``        added by an ``init`` listener registered before the real locustfile is imported
4. loadgen's       added by loadgen's ``init`` listener (``Fleet.merge_report``: stats, health)
5. ``_after``      added by an ``init`` listener registered after the real locustfile

so thread CPU (``time.thread_time()``: the master's one OS thread runs every greenlet, and the
listeners do not yield) from 1 to 5 is the cost of every listener, and from 3 to 5 loadgen's alone.
At quit the master writes ``<results-dir>/master_probe.json``: ``reports``, ``listeners_cpu_s``,
``loadgen_cpu_s``. Worker processes may run it too; they write nothing.

What-if knob (to measure a fix before anyone makes it in loadgen/): ``LLM_BENCH_MEMO_OPTIONS=1``
memoizes ``locust.argument_parser.default_args_dict``, which a Locust 2.47 worker calls once per
option for every spawn message (each call builds a whole parser; tests/integration/test_multihost.py).
"""

import functools
import json
import os
import time
from pathlib import Path

import locust.argument_parser
from locust import events
from locust.runners import MasterRunner

if os.environ.get("LLM_BENCH_MEMO_OPTIONS") == "1":
    _defaults = functools.cache(locust.argument_parser.default_args_dict)
    locust.argument_parser.default_args_dict = lambda: dict(_defaults())

_probe = {"reports": 0, "listeners_cpu_s": 0.0, "loadgen_cpu_s": 0.0}
_marks: dict[str, float] = {}


@events.worker_report.add_listener
def _before(client_id, data, **_):
    _marks["before"] = time.thread_time()


@events.init.add_listener
def _early_init(environment, **_):
    @environment.events.worker_report.add_listener
    def _mid(client_id, data, **_):
        _marks["mid"] = time.thread_time()


from locustfile import *  # noqa: E402,F401,F403


@events.init.add_listener
def _late_init(environment, **_):
    if not isinstance(environment.runner, MasterRunner):
        return

    @environment.events.worker_report.add_listener
    def _after(client_id, data, **_):
        now = time.thread_time()
        if "before" in _marks and "mid" in _marks:
            _probe["reports"] += 1
            _probe["listeners_cpu_s"] += now - _marks.pop("before")
            _probe["loadgen_cpu_s"] += now - _marks.pop("mid")

    @environment.events.quit.add_listener
    def _write(**_):
        out = Path(environment.parsed_options.results_dir) / "master_probe.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(_probe))
