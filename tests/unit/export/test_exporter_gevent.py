"""The exporter under gevent monkey-patching (as in a Locust process): it serves scrapes from a
greenlet and other greenlets keep running. Runs in a subprocess so patching stays out of pytest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, urllib.request
    import gevent
    from loadgen.export.exporter import ExporterSnapshot, start_exporter
    from loadgen.stats.stage_stats import Collector

    ticks = 0
    def ticker():
        global ticks
        while True:
            ticks += 1
            gevent.sleep(0.002)

    class Source:
        def exporter_snapshot(self):
            return ExporterSnapshot(totals=Collector().totals, users=3, model="m")

    handle = start_exporter("127.0.0.1", 0, Source())
    gevent.spawn(ticker)
    progress, bodies = [], []
    for _ in range(3):
        before = ticks
        # the scrape runs in this greenlet; the server runs in its own; the ticker must go on
        bodies.append(urllib.request.urlopen(handle.url, timeout=5).read().decode())
        gevent.sleep(0.05)
        progress.append(ticks - before)
    handle.stop()
    print(json.dumps({"patched": monkey.is_module_patched("threading"), "progress": progress,
                      "users_line": [l for l in bodies[-1].splitlines() if l.startswith("llm_loadgen_users")],
                      "port": handle.port}))
    """
)


def test_exporter_serves_under_gevent_without_blocking_the_loop():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["patched"] is True
    assert out["port"] > 0
    assert out["users_line"] == ['llm_loadgen_users{endpoint="",model="m",scenario=""} 3.0']
    assert all(p > 0 for p in out["progress"]), out["progress"]
