"""Every query of the Grafana dashboard, run against a real Prometheus scraping real processes.

Data: two simulators (vLLM and SGLang flavors, with faults) serve real streams and their own
``/metrics``; two real ``locust --headless -f locustfile.py`` runs (one per simulator) load them
with the exporter on. Prometheus scrapes both exporters (job ``llm-loadgen``) and both simulators
(job ``llm-server``) every second. The test fails if any dashboard expression errors or returns no
data, and checks that client latencies are those the fixed-timing simulators produce.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from contextlib import ExitStack
from pathlib import Path

import pytest

from loadgen.sim.launch import running_sim
from tests.integration.test_guard import serve
from tests.support.dcgm import dcgm_scrapes
from tests.support.ports import free_port
from tests.support.procs import stop_process
from tests.support.promtools import (
    PrometheusProcess,
    label_values,
    problems,
    prometheus_binary,
    query_all_dashboard_exprs,
    substitute,
    variable_queries,
)
from tests.support.runlocust import ROOT, locust_cmd

pytestmark = [
    pytest.mark.integration,
    pytest.mark.solo,  # its runs' windows must hold data when Prometheus is queried: alone (flaked beside test_multihost)
    pytest.mark.timeout(150),
    pytest.mark.skipif(prometheus_binary() is None,
                       reason="prometheus not installed: run scripts/ensure-prometheus.sh"),
]

DASHBOARD = ROOT / "grafana" / "dashboards" / "llm-loadgen.json"
# llm-loadgen-spec: a run against an engine simulator that speculates and caches prefixes, for the
# panels of the server's window figures and the cached share (the fixed sims have neither); a job
# of its own keeps its latencies out of test_client_figures_match_the_simulators
VARIABLES = {"datasource": "prometheus", "loadgen_job": "llm-loadgen|llm-loadgen-spec", "model": ".*",
             "server_job": "llm-server"}
SPEC_SIM = ("--timing", "engine", "--flavor", "vllm", "--spec-accept", "0.4,0.6", "--prefix-cache-tokens", "100000",
            "--prefix-block-tokens", "16")
MODEL = "llmsim-fixed"
FAULTS = ("--fault-http-503", "0.05", "--fault-stream-error", "0.05", "--fault-truncate", "0.03")


def hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc



def start_locust(stack: ExitStack, sim_url: str, port: int, results: Path, load: tuple) -> None:
    """A real locust run with the exporter on; long enough to outlive the queries, then stopped."""
    cmd = locust_cmd(sim_url, "--scenario", "config/smoke.yaml", "--output-tokens", "25", *load,
                     "--warmup", "2", "--stage-duration", "5",
                     "--slo", "ttft_s=0.5,tpot_s=0.05",
                     "--exporter-port", str(port), "--results-dir", str(results))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    stack.callback(stop_process, proc, 20)


@pytest.fixture(scope="module")
def live_prometheus(tmp_path_factory):
    """Sims + locust runs + Prometheus, all stopped at teardown even on failure."""
    tmp = tmp_path_factory.mktemp("dash")
    with ExitStack() as stack:
        vllm = stack.enter_context(running_sim("--preset", "fixed", "--flavor", "vllm", *FAULTS))
        sglang = stack.enter_context(running_sim("--preset", "fixed", "--flavor", "sglang",
                                                 "--tokens-per-chunk", "2", *FAULTS))
        spec = stack.enter_context(running_sim(*SPEC_SIM))
        ports = [free_port(), free_port(), free_port()]
        # a fake DCGM exporter (tests/fixtures/dcgm): its open scrape to the start's check and the first
        # window's open edge, its close scrape to every later read
        opened, closed = dcgm_scrapes()
        scrapes = iter([opened, opened])
        dcgm, _ = stack.enter_context(serve({"/metrics": lambda: (200, next(scrapes, closed))}))
        # one closed-loop run, priced (the cost table needs cost.gpus) with GPU telemetry and sliced
        # (the soak row: 1 s slices, a drift verdict from 3 of them, so stage 0's comes ~1 s after its
        # window closes), one open-loop run (the rate panels need one), one multi-turn chat run
        loads = (("--stages", "1,2,3,4,6", "--gpus", "2", "--gpu-hour-usd", "2.5", "--gpu-metrics", dcgm + "/metrics",
                  "--slice-s", "1", "--set", "drift.min_slices=3"),
                 ("--rates", "2,4,6,8,10"),
                 ("--stages", "2,4,6,8,10", "--endpoint", "chat", "--turns", "3"))
        for sim, port, name, load in zip((vllm, sglang, spec), ports, ("vllm", "sglang", "spec"), loads, strict=True):
            start_locust(stack, sim.url, port, tmp / name, load)
        prom = stack.enter_context(PrometheusProcess(
            {"llm-loadgen": [f"127.0.0.1:{p}" for p in ports[:2]], "llm-loadgen-spec": [f"127.0.0.1:{ports[2]}"],
             "llm-server": [hostport(vllm.url), hostport(sglang.url)]}))
        # >= 8 scrapes of every target, so [5s] rates and the [30s] range have data
        resp = prom.wait_for('min(count_over_time(up{job=~"llm-.*"}[1m])) >= 8', timeout_s=40)
        assert resp["data"]["result"], f"targets not scraped: {prom.targets_health()}\n{prom.log_tail()}"
        # and some failures and stage changes have happened under load
        prom.wait_for('sum(llm_loadgen_requests_total{outcome!="ok"}) > 0', timeout_s=30)
        prom.wait_for('min(max_over_time(llm_loadgen_stage{job="llm-loadgen"}[2m])) >= 1', timeout_s=40)
        # the spec run finished a stage: the server's window figures are exported
        prom.wait_for('max(llm_loadgen_server_spec_accept_length{job="llm-loadgen-spec"}) > 1', timeout_s=40)
        # and the priced run finished one: its cost figures are exported
        prom.wait_for('count(llm_loadgen_stage_usd_per_million_output_tokens{job="llm-loadgen"}) > 0', timeout_s=40)
        prom.wait_for('count(llm_loadgen_stage_joules_per_output_token{job="llm-loadgen"}) > 0', timeout_s=40)
        # and its first sliced stage has its drift verdict (the slice gauges came with its first slice)
        prom.wait_for('count(llm_loadgen_stage_drift_slope_per_hour{job="llm-loadgen"}) > 0', timeout_s=40)
        yield prom, None


# Panels whose figure exists only when the server reports it: the fixed-timing simulators have no
# prefix cache, so the cached share is 0 / 0 here (Grafana shows "No data", as for such a server).
# The query must still parse and run: its only allowed problem is NaN.
NEEDS_SERVER_DETAIL = {"llm_loadgen_cache_reported_prompt_tokens_total": "usage.prompt_tokens_details"}


# The soak row's slice figures are those of the latest closed slice, and a slice in which no request
# completed has no p99 nor error ratio (docs/soak.md): the first 1 s slice of a stage at C=1 often
# has none, so for that second the gauges are absent. The panel draws the last 30 s, gaps and all;
# these are checked the same way: data somewhere in the last 30 s (1 s steps), not at one instant.
SLICE_FIGURES = "llm_loadgen_slice_"


def test_every_dashboard_query_returns_data(live_prometheus):
    prom, _source = live_prometheus
    assert set(prom.targets_health().values()) == {"up"}, prom.targets_health()
    results = query_all_dashboard_exprs(prom.url, DASHBOARD, VARIABLES)
    for expr in [e for e in results if SLICE_FIGURES in e]:
        results[expr] = prom.query(f"last_over_time(({substitute(expr, VARIABLES)})[30s:1s])")
    assert len(results) >= 30
    found = problems(results)
    detail_only = {e: p for e, p in found.items() if any(name in e for name in NEEDS_SERVER_DETAIL)}
    assert all(p.startswith("only NaN") for p in detail_only.values()), detail_only
    assert len(detail_only) <= len(NEEDS_SERVER_DETAIL)
    assert {e: p for e, p in found.items() if e not in detail_only} == {}


def test_variable_queries_find_the_default_values(live_prometheus):
    prom, _source = live_prometheus
    dashboard = json.loads(DASHBOARD.read_text())
    expected = {"loadgen_job": "llm-loadgen", "server_job": "llm-server", "model": MODEL}
    for name, q in variable_queries(dashboard).items():
        assert expected[name] in label_values(prom.url, q, VARIABLES), (name, q)


def test_client_figures_match_the_simulators(live_prometheus):
    """Fixed sims: TTFT 200 ms, 20 ms per token (SGLang flavor: 2 tokens per 40 ms chunk)."""
    prom, _source = live_prometheus

    def scalar(expr: str) -> float:
        resp = prom.query(expr)
        assert resp["status"] == "success" and resp["data"]["result"], (expr, resp)
        return float(resp["data"]["result"][0]["value"][1])

    sel = '{job="llm-loadgen"}'
    ttft_p50 = scalar(f"histogram_quantile(0.5, sum by (le) (rate(llm_loadgen_ttft_seconds_bucket{sel}[30s])))")
    itl_p50 = scalar(f"histogram_quantile(0.5, sum by (le) (rate(llm_loadgen_itl_seconds_bucket{sel}[30s])))")
    assert 0.19 <= ttft_p50 <= 0.4, ttft_p50
    assert 0.015 <= itl_p50 <= 0.04, itl_p50
    # SGLang sim: 2-token chunks every 40 ms, so mean chunk gap ~ 1.33 x mean per-token ITL (20 ms)
    mean = "sum(rate(llm_loadgen_{0}_seconds_sum{1}[30s])) / sum(rate(llm_loadgen_{0}_seconds_count{1}[30s]))"
    assert scalar(mean.format("itl_chunk", sel)) > 1.15 * scalar(mean.format("itl", sel))
    # faults were injected and counted by kind
    failed = scalar('sum(llm_loadgen_requests_total{job="llm-loadgen", outcome!="ok"})')
    assert failed > 0
    assert scalar('sum(llm_loadgen_requests_total{job="llm-loadgen", outcome="ok"})') > 0
    # SLO: the sims meet both objectives (TTFT 200 ms, 20 ms per token); the faults do not
    met = scalar('sum(llm_loadgen_slo_met_requests_total{job="llm-loadgen"})')
    ok = scalar('sum(llm_loadgen_requests_total{job="llm-loadgen", outcome="ok"})')
    assert 0 < met <= ok
    assert 0.5 < scalar('min(llm_loadgen_slo_attainment_ratio{job="llm-loadgen"})') <= 1.0
    assert scalar('max(llm_loadgen_slo_attainment_target_ratio{job="llm-loadgen"})') == 0.99
    # both runs reached their second stage (index 1) while Prometheus watched
    assert scalar('min(max_over_time(llm_loadgen_stage{job="llm-loadgen"}[2m]))') >= 1


def test_the_drift_table_holds_each_sliced_stage_verdict_and_its_slopes(live_prometheus):
    """The soak row's drift table, its one query as Grafana sends it: per judged stage of the sliced
    run, the verdict (series="drift", 0 or 1) beside the slopes of the series tested."""
    prom, _source = live_prometheus
    dashboard = json.loads(DASHBOARD.read_text())
    (table,) = [p for p in dashboard["panels"] if p["title"] == "Drift by stage"]
    resp = prom.query(substitute(table["targets"][0]["expr"], {**VARIABLES, "loadgen_job": "llm-loadgen"}))
    assert resp["status"] == "success", resp
    by_stage: dict[str, dict[str, float]] = {}
    for r in resp["data"]["result"]:
        by_stage.setdefault(r["metric"]["stage"], {})[r["metric"]["series"]] = float(r["value"][1])
    assert "0" in by_stage, by_stage
    for stage, row in by_stage.items():
        assert row.get("drift") in (0.0, 1.0), (stage, row)
        assert {"throughput", "ttft_p99", "itl_p50"} <= set(row), (stage, row)
