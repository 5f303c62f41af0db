"""grafana/: the dashboard JSON is what build_dashboard.py generates, well formed, and queries only
metrics that exist (ours: checked against the exporter's own exposition); the provisioning,
Prometheus and compose files parse and point at each other. The queries are run against a real
Prometheus in test_dashboard_prometheus.py."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.export.exporter import ExporterSnapshot, make_registry
from loadgen.export.stage_gauges import COST_FIGURES, GPU_FIGURES, SERVER_FIGURES
from loadgen.stats.stage_stats import Collector
from tests.support.promtools import DEFAULT_MACROS, dashboard_exprs, substitute, variable_queries

GRAFANA = Path(__file__).resolve().parents[3] / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "llm-loadgen.json"
VARIABLES = {"datasource": "prometheus", "loadgen_job": "llm-loadgen", "model": ".*",
             "server_job": "llm-server"}
SERVER_METRICS = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total", "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
    "sglang:num_retracted_requests_total", "sglang:generation_tokens_total",
    "sglang:time_to_first_token_seconds_bucket", "sglang:inter_token_latency_seconds_bucket",
)


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard):
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_committed_json_is_the_generated_one():
    spec = importlib.util.spec_from_file_location("build_dashboard", GRAFANA / "build_dashboard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert DASHBOARD.read_text() == mod.render(), "run: python grafana/build_dashboard.py"


def test_dashboard_structure(dashboard):
    assert dashboard["uid"] == "llm-loadgen" and 36 <= dashboard["schemaVersion"] <= 41
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
    for p in panels(dashboard):
        assert p["title"] and p["description"] and p["targets"], p["title"]
        assert p["datasource"]["uid"] == "${datasource}"
        assert all(t["expr"] and t["datasource"]["uid"] == "${datasource}" for t in p["targets"])


def test_every_variable_used_is_defined(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "loadgen_job", "server_job", "model"} <= defined
    assert set(VARIABLES) == defined
    texts = dashboard_exprs(dashboard) + list(variable_queries(dashboard).values())
    used = {m for t in texts for m in re.findall(r"\$\{?(\w+)", t)}
    assert used <= defined | set(DEFAULT_MACROS), used - defined - set(DEFAULT_MACROS)
    for expr in dashboard_exprs(dashboard):
        assert "$" not in substitute(expr, VARIABLES)


# a finished stage with every per-stage figure (loadgen.export.stage_gauges): clocks, server, cost
FINISHED_STAGE = {"index": 0, "concurrency": 1, "server": {"spec_accept_length": 2.0, "spec_acceptance_rate": 0.5,
                                                           "prefix_cache_hit_rate": 0.5},
                  "breakdown": {"ttft": {"client_mean_s": 0.3, "server_mean_s": 0.2, "client_p50_s": 0.3,
                                         "network_client_mean_s": 0.1}},
                  "output_tokens_per_gpu_per_s": 500.0, "total_tokens_per_gpu_per_s": 900.0,
                  "usd_per_million_output_tokens": 1.4, "usd_per_million_total_tokens": 0.8,
                  "joules_per_output_token": 0.6, "kwh_per_million_output_tokens": 0.17,
                  "gpu": {"gpus": 8, "power_w_total": 5000.0, "util_pct_mean": 97.0, "fb_used_mib_max": 77000.0,
                          "energy_j": 150000.0},
                  # a sliced stage's drift verdict (loadgen.export.slice_gauges)
                  "drift": {"drift": False, "series": {"throughput": {"slope_per_h": -3.0},
                                                       "kv_usage": {"slope_per_h": 0.01}}}}
# a soak's latest closed time slice (a slices.csv row): every figure the exporter shows
LATEST_SLICE = {"stage": 0, "slice": 3, "start_s": 180.0, "output_tokens_per_s": 900.0, "ttft_p99_s": 0.4,
                "itl_p99_s": 0.03, "e2e_p99_s": 5.0, "error_rate": 0.01, "requests": 120,
                "server_kv_usage_mean": 0.4}


def test_loadgen_metric_names_exist_in_the_exporter(dashboard):
    snap = ExporterSnapshot(totals=Collector().totals, stage_index=0, target_concurrency=1,
                            kv_projected_tokens=1, kv_capacity_tokens=1, client_cpu_percent=1,
                            client_loop_lag_s=0.001, offered_rate_per_s=1.0, slo_attainment_target=0.99,
                            slo_stage_attainment=1.0, stages=(FINISHED_STAGE,),
                            latest_slice=LATEST_SLICE)
    text = generate_latest(make_registry(type("S", (), {"exporter_snapshot": lambda self: snap})())).decode()
    exported = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    used = {m for e in dashboard_exprs(dashboard) for m in re.findall(r"\bllm_loadgen_\w+", e)}
    assert used and used <= exported, used - exported
    # every metric we export is shown somewhere (histograms through _bucket)
    shown = {re.sub(r"_(bucket|count|sum)$", "", m) for m in used}
    assert {re.sub(r"_(bucket|count|sum)$", "", m) for m in exported} <= shown


def test_server_panels_cover_vllm_and_sglang(dashboard):
    exprs = " ".join(dashboard_exprs(dashboard))
    for name in SERVER_METRICS:
        assert name in exprs, name
    for expr in dashboard_exprs(dashboard):
        if "vllm:" in expr or "sglang:" in expr:
            assert 'job=~"$server_job"' in expr, expr


def test_provisioning_prometheus_and_compose_fit_together():
    ds = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus" and ds["datasources"][0]["uid"] == "prometheus"
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/provider.yml").read_text())
    dash_path = provider["providers"][0]["options"]["path"]
    prom = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    assert {j["job_name"] for j in prom["scrape_configs"]} == {"llm-loadgen", "llm-server"}
    compose = yaml.safe_load((GRAFANA / "docker-compose.yml").read_text())
    assert set(compose["services"]) == {"prometheus", "grafana"}
    mounts = {}
    for svc in compose["services"].values():
        for vol in svc["volumes"]:
            src, dst = vol.split(":")[:2]
            if src.startswith("./"):
                assert (GRAFANA / src).exists(), f"compose mounts missing {src}"
                mounts[dst] = src
    assert mounts[dash_path] == "./dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./provisioning"
    assert mounts["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"
    assert any("--config.file=/etc/prometheus/prometheus.yml" == c
               for c in compose["services"]["prometheus"]["command"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (scripts/ensure-prometheus.sh)")
def test_promtool_accepts_prometheus_yml():
    proc = subprocess.run(["promtool", "check", "config", str(GRAFANA / "prometheus.yml")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_slo_panels_sit_beside_throughput(dashboard):
    by_title = {p["title"]: p for p in panels(dashboard)}
    tokens, goodput, slo = by_title["Tokens/s"], by_title["Goodput vs throughput"], by_title["SLO attainment"]
    assert tokens["gridPos"]["y"] == goodput["gridPos"]["y"]  # the same line of the grid
    assert goodput["gridPos"]["x"] == tokens["gridPos"]["x"] + tokens["gridPos"]["w"]
    exprs = " ".join(t["expr"] for t in goodput["targets"] + slo["targets"])
    for name in ("llm_loadgen_slo_met_output_tokens_total", "llm_loadgen_slo_met_requests_total",
                 "llm_loadgen_slo_attainment_ratio", "llm_loadgen_slo_attainment_target_ratio"):
        assert name in exprs, name
    assert slo["fieldConfig"]["defaults"]["unit"] == "percentunit"


def test_per_stage_series_are_read_for_one_stage_or_by_stage(dashboard):
    """The figures of finished stages carry the stage's labels (loadgen.export.stage_gauges): a panel
    either keeps the latest finished stage (joined on stage_finished) or shows them by stage; a bare
    max() over them would mix stages."""
    per_stage = {f"llm_loadgen_{name}" for _, name, _ in SERVER_FIGURES + COST_FIGURES}
    per_stage |= {f"llm_loadgen_{name}" for _, name, _, _ in GPU_FIGURES}
    per_stage |= {"llm_loadgen_stage_latency_seconds", "llm_loadgen_stage_breakdown_seconds",
                  "llm_loadgen_stage_drift", "llm_loadgen_stage_drift_slope_per_hour"}
    reading = [e for e in dashboard_exprs(dashboard) if any(name in e for name in per_stage)]
    assert len(reading) >= len(per_stage)
    for expr in reading:
        latest = "and on (job, instance, stage) (llm_loadgen_stage_finished" in expr
        by_stage = re.search(r"by \([^)]*\bstage\b", expr) is not None
        assert latest or by_stage, expr
    latest = {e for e in reading if "llm_loadgen_stage_finished" in e}
    assert {n for n in per_stage if any(n in e for e in latest)} >= {
        "llm_loadgen_stage_breakdown_seconds", "llm_loadgen_server_spec_accept_length"}


def test_soak_row_shows_every_slice_figure_and_each_drift_series(dashboard):
    """The soak row (docs/soak.md): a panel for each slice gauge, and the drift table's columns are
    the series the drift test tests (loadgen.stats.drift.SERIES), each with its slope's unit."""
    from loadgen.export.slice_gauges import SLICE_FIGURES
    from loadgen.stats.drift import SERIES

    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    soak = next(r for r in rows if r["title"].startswith("Soak"))
    after = next((r["gridPos"]["y"] for r in rows if r["gridPos"]["y"] > soak["gridPos"]["y"]), 10**6)
    inside = [p for p in panels(dashboard) if soak["gridPos"]["y"] < p["gridPos"]["y"] < after]
    exprs = " ".join(t["expr"] for p in inside for t in p["targets"])
    for _, name, _ in SLICE_FIGURES:
        assert f"llm_loadgen_{name}" in exprs, name
    table = next(p for p in inside if p["title"] == "Drift by stage")
    assert "llm_loadgen_stage_drift{" in exprs and "llm_loadgen_stage_drift_slope_per_hour" in exprs
    renamed = next(t for t in table["transformations"] if t["id"] == "organize")["options"]["renameByName"]
    assert set(renamed) == {"stage\\series", "drift"} | {s.key for s in SERIES}
    units = {o["matcher"]["options"]: o["properties"][0]["value"] for o in table["fieldConfig"]["overrides"]
             if o["properties"][0]["id"] == "unit"}
    by_key = {s.key: s.unit for s in SERIES}
    for key, title in renamed.items():
        if key in by_key:  # seconds per hour in s, ratios per hour in percent, the rest plain
            assert units.get(title, "short") == {"s": "s", "ratio": "percentunit"}.get(by_key[key], "short"), key
