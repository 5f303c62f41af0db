"""The container recipes, run for real: the image builds and the compose stack sweeps.

As root with Docker installed (``make docker-tools``): uses the machine's Docker daemon or starts
``dockerd`` (and stops it again), imports the debootstrap bookworm base (made once and cached,
scripts/docker-base-image.sh), builds the llm-loadgen image (Dockerfile) and a Prometheus image from
Debian's package (deploy/compose/prometheus.Dockerfile) on it with the classic builder, then runs
deploy/compose/docker-compose.yml as it ships -- simulator, master, two workers, Prometheus -- with
an env file only: a short sweep (stages 2, 4 of a tiny scenario, faults injected by the simulator).

Two runs: one whole, against a vLLM-flavored simulator; one against an SGLang-flavored simulator
in which one worker container is killed during the first stage. Each run's dashboard queries are
evaluated while the sweep is in its second stage (the two flavors together cover every query).
Skips with the reason when not root or when Docker cannot start here.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from loadgen.run_folder.folders import resolve_run_dir
from loadgen.stats.stage_stats import StageStats
from tests.integration.test_dashboard_prometheus import DASHBOARD, FAULTS, VARIABLES
from tests.support import dockerhost
from tests.support.dockerhost import (
    ADDRESS_POOL,
    IMAGE,
    LOADGEN_UID,
    PROM_IMAGE,
    ROOT,
    ComposeStack,
    Host,
    docker,
    docker_cli,
)
from tests.support.ports import free_port
from tests.support.promtools import (
    label_values,
    problems,
    query_all_dashboard_exprs,
    targets_health,
    variable_queries,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
host = dockerhost.host  # the module's fixture: a daemon with both images built

COMPOSE_DIR = ROOT / "deploy" / "compose"
PROJECT = "llm-loadgen-deploytest"
STAGES = [2, 4]  # C=2 puts one user on each of the two workers
SCENARIO = {"name": "compose-deploy-test", "input_tokens": 32, "output_tokens": 16,
            "request": {"connect_timeout_s": 5, "read_timeout_s": 30},
            # windows long enough that the second stage is still running when the queries run
            "stages": {"list": STAGES, "ramp_s": 0, "warmup_s": 1, "max_warmup_s": 10,
                       "duration_s": 20, "max_window_s": 40, "drain_s": 10},
            "guard": {"watch_interval_s": 1}}
FLAVOR_PREFIX = {"vllm": "vllm:", "sglang": "sglang:"}


@dataclass
class Run:
    flavor: str
    results: Path
    exit_code: int
    master_log: str
    ledgers: list[StageStats]
    subnet: str
    targets: dict[str, str]
    queries: dict[str, dict]
    variables: dict[str, list[str]]
    leftovers: dict[str, list[str]]
    bridges_after: list[str]
    master_host_config: dict
    killed: list[str] = field(default_factory=list)


def scrape_interval_s() -> int:
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    return int(prom["global"]["scrape_interval"].rstrip("s"))


def ledgers(container: str) -> list[StageStats]:
    """The worker's own ledger (results/workers/ID.json inside its container), read after it exited."""
    tar = subprocess.run([docker_cli() or "docker", "cp",
                          f"{container}:/app/results/workers", "-"], capture_output=True, timeout=60)
    if tar.returncode != 0:
        return []
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        return [StageStats.from_message(json.loads(t.extractfile(m).read())["totals"])
                for m in t.getmembers() if m.isfile() and m.name.endswith(".json")]


def run_stack(host: Host, tmp: Path, flavor: str, kill_worker: bool) -> Run:
    """Up, watch, (kill), query, wait for the master, down; every observation kept for the tests."""
    results, scenario = tmp / "results", tmp / "scenario.yaml"
    results.mkdir()
    os.chown(results, LOADGEN_UID, LOADGEN_UID)
    scenario.write_text(yaml.safe_dump(SCENARIO))
    scenario.chmod(0o644)
    prom_url = f"http://127.0.0.1:{(prom_port := free_port())}"
    env = {"HOST": "http://sim:8000", "COMPOSE_PROFILES": "sim", "WORKERS": "2",
           "SCENARIO": str(scenario), "RESULTS_DIR": str(results),
           "LOADGEN_UID": str(LOADGEN_UID), "LOADGEN_GID": str(LOADGEN_UID), "OPENAI_API_KEY": "",
           "SIM_PRESET": "fixed", "SIM_ARGS": " ".join(("--flavor", flavor, *FAULTS)),
           "IMAGE": IMAGE, "BASE_IMAGE": host.base, "PROMETHEUS_IMAGE": PROM_IMAGE,
           "PROMETHEUS_PORT": str(prom_port), "GRAFANA_PORT": str(free_port())}
    stack = ComposeStack(PROJECT, env, COMPOSE_DIR)
    killed: list[str] = []
    try:
        stack.down()  # whatever an interrupted earlier run left
        stack.compose("up", "--detach", "--no-build", "--pull", "never",
                      "sim", "master", "worker", "prometheus")
        master, workers = stack.containers("master")[0], stack.containers("worker")
        master_host_config = json.loads(docker("inspect", master).stdout)[0]["HostConfig"]
        net = json.loads(docker("network", "inspect", f"{PROJECT}_default").stdout)[0]
        subnet = net["IPAM"]["Config"][0]["Subnet"]

        def expect(expr: str, timeout_s: float) -> None:
            resp = wait_for(prom_url, expr, timeout_s)
            assert resp.get("data", {}).get("result"), (
                f"Prometheus: {expr} still empty after {timeout_s} s: {resp}; targets "
                f"{targets_health(prom_url)}\n{stack.compose('logs', 'master', check=False).stdout[-3000:]}")

        if kill_worker:  # during the first stage's window, with requests in flight
            expect('max(llm_loadgen_phase{phase="measure"}) == 1', timeout_s=120)
            expect("sum(llm_loadgen_inflight_requests) > 0", timeout_s=30)
            docker("kill", workers[0])
            killed.append(workers[0])
        rate_s = 4 * scrape_interval_s()  # Grafana's $__rate_interval: 4 scrape intervals
        expect('max(llm_loadgen_stage{job="llm-loadgen"}) >= 1', timeout_s=180)
        expect(f'min(count_over_time(up{{job=~"llm-.*"}}[{rate_s + 5}s])) >= 5', timeout_s=60)
        expect('sum(llm_loadgen_requests_total{outcome!="ok"}) > 0', timeout_s=30)
        # the client/server breakdown is exported once a stage's row is final (its last request done,
        # during the next stage's ramp): stage >= 1 alone can come a scrape before it
        expect("count(llm_loadgen_stage_breakdown_seconds) > 0", timeout_s=60)
        macros = {"__rate_interval": f"{rate_s}s", "__interval": f"{scrape_interval_s()}s"}
        queries = query_all_dashboard_exprs(prom_url, DASHBOARD, VARIABLES, macros)
        dashboard = json.loads(DASHBOARD.read_text())
        variables = {name: label_values(prom_url, q, VARIABLES) for name, q in variable_queries(dashboard).items()}
        targets = targets_health(prom_url)
        exit_code = stack.wait_exit(master, timeout_s=240)
        for w in workers:
            if w not in killed:
                stack.wait_exit(w, timeout_s=60)
        found = [ledger for w in workers for ledger in ledgers(w)]
        master_log = stack.compose("logs", "--no-color", "master").stdout
    finally:
        stack.down()
        leftovers = stack.leftovers()
        stack.close()
    bridges = [ln for ln in subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                                           text=True).stdout.splitlines() if net["Id"][:12] in ln]
    return Run(flavor, results, exit_code, master_log, found, subnet, targets, queries, variables,
               leftovers, bridges, master_host_config, killed)


@pytest.fixture(scope="module")
def whole_run(host, tmp_path_factory) -> Run:
    return run_stack(host, tmp_path_factory.mktemp("whole"), "vllm", kill_worker=False)


@pytest.fixture(scope="module")
def killed_run(host, tmp_path_factory) -> Run:
    return run_stack(host, tmp_path_factory.mktemp("killed"), "sglang", kill_worker=True)


def summary(run: Run) -> dict:
    path = resolve_run_dir(run.results) / "summary.json"  # the run's own folder in the volume
    assert path.is_file(), f"no summary.json in the results volume {run.results}:\n{run.master_log[-3000:]}"
    return json.loads(path.read_text())


# === the image =====================================================================================
def test_image_holds_only_what_it_needs(host, capsys):
    with capsys.disabled():
        print(f"\n[deploy] {IMAGE} on {host.base}: {host.image_size_mb:.0f} MB; "
              f"dockerd {'started by the test' if host.daemon_started_here else 'already running'}")
    cfg = json.loads(docker("image", "inspect", IMAGE).stdout)[0]["Config"]
    assert cfg["User"] == f"{LOADGEN_UID}:{LOADGEN_UID}"
    assert cfg["Entrypoint"] == ["llm-loadgen"]
    assert not any(e.startswith(("PIP_", "REQUESTS_CA", "SSL_CERT")) for e in cfg["Env"]), cfg["Env"]
    # The build machine's pip settings went to the build stage only: not in the image's history.
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", IMAGE).stdout
    for name, value in host.build_args.items():
        for part in re.findall(r"[^\s]{16,}", value)[:3]:
            assert part not in history, f"build arg {name} is recorded in the image's history"
    probe = ("import shutil, importlib.util, pathlib; "
             "print(shutil.which('gcc'), shutil.which('cc'), importlib.util.find_spec('pip'), "
             "pathlib.Path('/tmp/pip-ca.pem').exists(), pathlib.Path.home().joinpath('.cache/pip').exists())")
    out = docker("run", "--rm", "--network", "none", "--entrypoint", "python", IMAGE, "-c", probe).stdout
    assert out.split() == ["None", "None", "None", "False", "False"], out
    version = docker("run", "--rm", "--network", "none", IMAGE, "--version").stdout
    assert version.startswith("llm-loadgen ") and "(Locust 2.47" in version, version


# === the whole run =================================================================================
def test_sweep_completes_with_both_workers(whole_run):
    s = summary(whole_run)
    assert s["run"]["stop_reason"] == "completed", s["run"]
    assert s["run"]["workers"] == 2 and s["run"]["worker_losses"] == []
    assert [st["concurrency"] for st in s["stages"]] == STAGES
    assert all(st["requests"] > 0 for st in s["stages"])
    # Faults were injected, so Locust's rule (some requests failed) gives exit code 1.
    assert sum(st["error_count"] for st in s["stages"]) > 0
    assert whole_run.exit_code == s["run"]["exit_code"] == 1
    # Each worker container did work: its own ledger, read back after it exited.
    assert len(whole_run.ledgers) == 2 and all(ld.requests_ok > 0 for ld in whole_run.ledgers)


def test_results_land_in_the_results_volume_on_the_host(whole_run):
    run_dir = resolve_run_dir(whole_run.results)
    assert (whole_run.results / "latest").resolve() == run_dir.resolve()  # the link works on the host
    for name in ("summary.json", "stages.csv", "report.html"):
        path = run_dir / name
        assert path.is_file(), name
        assert path.stat().st_uid == LOADGEN_UID  # written by the master as LOADGEN_UID


def test_loadgen_containers_run_unprivileged(whole_run):
    cfg = whole_run.master_host_config
    assert cfg["CapDrop"] == ["ALL"] and "no-new-privileges:true" in cfg["SecurityOpt"]
    assert cfg["PortBindings"] in ({}, None), "the master publishes no port on the host"


# The open-loop row's series exist only in a rate sweep and the SLO panels' only with objectives;
# the compose stack runs a plain concurrency sweep (tests/integration/test_dashboard_prometheus.py runs the
# other modes, so those panels are proven there).
MODE_ONLY = ("schedule_lateness", "offered_rate", "dropped_by_client", "scheduled_requests", "slo_")
# and its fixed-timing simulator neither speculates nor reports prefix-cache detail: the panels of
# those server features have data only against a server that does (the spec run of
# tests/integration/test_dashboard_prometheus.py proves them)
SERVER_FEATURE_ONLY = ("server_spec_", "server_prefix_cache", "cached_prompt_tokens", "cache_reported_prompt_tokens")
# and the stack prices nothing (no --gpus): the cost table has data only in a priced run (proven by
# test_dashboard_prometheus's priced run)
PRICED_ONLY = ("_per_gpu_per_second", "_usd_per_million_")
# and it runs no soak (no --slice-s) and reads no GPU exporter (no --gpu-metrics): the soak row and
# the GPU columns have data only then (test_dashboard_prometheus's sliced run with a fake DCGM
# exporter proves them)
SLICED_OR_GPU_ONLY = ("llm_loadgen_slice_", "llm_loadgen_stage_drift", "llm_loadgen_stage_gpu",
                      "joules_per_output_token")


def _closed_loop(queries: dict) -> dict:
    return {e: r for e, r in queries.items()
            if not any(k in e for k in MODE_ONLY + SERVER_FEATURE_ONLY + PRICED_ONLY + SLICED_OR_GPU_ONLY)}


def test_prometheus_scrapes_the_master_and_every_dashboard_query_has_data(whole_run, killed_run):
    for run in (whole_run, killed_run):
        assert run.targets == {"http://master:9646/metrics": "up", "http://sim:8000/metrics": "up"}
        assert "llm-loadgen" in run.variables["loadgen_job"] and "llm-server" in run.variables["server_job"]
        assert run.variables["model"] == ["llmsim-fixed"]
        other = next(p for f, p in FLAVOR_PREFIX.items() if f != run.flavor)
        mine = {e: r for e, r in _closed_loop(run.queries).items() if other not in e}
        assert problems(mine) == {}, f"{run.flavor} run"
        assert all(r["status"] == "success" for r in run.queries.values())
    covered = {e for run in (whole_run, killed_run) for e in _closed_loop(run.queries)
               if next(p for f, p in FLAVOR_PREFIX.items() if f != run.flavor) not in e}
    assert covered == set(_closed_loop(whole_run.queries)) and len(covered) >= 40


def test_compose_network_is_docker_bridge_from_the_chosen_pool(host, whole_run):
    import ipaddress

    if not host.daemon_started_here:
        pytest.skip("the machine's own dockerd runs with its own address pools")
    assert ipaddress.ip_network(whole_run.subnet).subnet_of(ipaddress.ip_network(ADDRESS_POOL))


def test_down_leaves_nothing_behind(whole_run, killed_run):
    for run in (whole_run, killed_run):
        assert run.leftovers == {"containers": [], "networks": [], "volumes": []}, run.flavor
        assert run.bridges_after == [], f"the compose network's bridge is still there: {run.bridges_after}"


# === one worker killed mid-stage ===================================================================
def test_a_killed_worker_is_recorded_and_the_sweep_finishes(killed_run):
    s = summary(killed_run)
    assert len(killed_run.killed) == 1
    (loss,) = s["run"]["worker_losses"]
    assert loss["stage"] in (0, 1) and loss["concurrency"] in STAGES
    assert s["run"]["ended_at"] is not None and s["run"]["workers"] == 2
    assert [st["concurrency"] for st in s["stages"]] == STAGES
    assert s["stages"][-1]["requests"] > 0  # the surviving worker carried the last stage
    assert "lost during stage" in killed_run.master_log
