"""The Kubernetes manifests' containers, run on Docker as a kubelet would start them.

No cluster here, so what a cluster adds is stood in for: a Docker network with the Service names as
aliases (``llm-loadgen-master``, and the master Job's ``--host`` name for the simulator), the
ConfigMap's scenario mounted at its mountPath, a results directory with the pod's fsGroup
(group 10001, setgid, group-writable), ``$(POD_NAME)`` expanded as Kubernetes expands env
references in args, and each pod's securityContext (runAsUser/Group, capabilities dropped, no
privilege escalation). The image's entrypoint with the manifests' ``args``, unchanged otherwise.

The scenario is the ConfigMap's (the seeds' full sweep), so the test stops the master (SIGTERM, as
``kubectl delete`` does) once both workers are connected and stage 0 has started: the master must
write its results under ``/app/results/$(POD_NAME)`` and the workers exit 0 when it quits.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from loadgen.run_folder.folders import resolve_run_dir
from tests.support import dockerhost
from tests.support.dockerhost import IMAGE, LABEL, LOADGEN_UID, ROOT, docker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
host = dockerhost.host  # the module's fixture: a daemon with both images built

K8S = ROOT / "deploy" / "k8s"
NETWORK = "llm-loadgen-k8stest"
POD_NAME = "llm-loadgen-master-x7k2p"


def manifest(name: str) -> dict:
    return yaml.safe_load((K8S / name).read_text())


def pod_flags(pod: dict, container: dict, name: str) -> list[str]:
    """docker run flags for one pod: user, capabilities, privilege escalation, env, name."""
    ctx, cctx = pod["securityContext"], container["securityContext"]
    flags = ["--detach", "--label", LABEL, "--network", NETWORK, "--name", name,
             "--user", f"{ctx['runAsUser']}:{ctx['runAsGroup']}"]
    flags += [f"--cap-drop={c}" for c in cctx["capabilities"]["drop"]]
    if cctx["allowPrivilegeEscalation"] is False:
        flags += ["--security-opt", "no-new-privileges:true"]
    return flags


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion in container args (unknown references stay as written)."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def logs(name: str) -> str:
    proc = docker("logs", name, check=False)
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def k8s_run(host, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("k8s")
    master_job, worker_job = manifest("master-job.yaml"), manifest("worker-job.yaml")
    mpod, wpod = master_job["spec"]["template"]["spec"], worker_job["spec"]["template"]["spec"]
    (master,), (worker,) = mpod["containers"], wpod["containers"]
    scenario = tmp / "scenario.yaml"
    scenario.write_text(manifest("configmap-scenario.yaml")["data"]["scenario.yaml"])
    scenario.chmod(0o644)
    results = tmp / "results"  # the PVC, as fsGroup leaves it: group-owned, setgid, group-writable
    results.mkdir()
    os.chown(results, 0, mpod["securityContext"]["fsGroup"])
    results.chmod(0o2775)
    mounts = {m["name"]: m["mountPath"] for m in master["volumeMounts"]}
    target = master["args"][master["args"].index("--host") + 1]  # the server under test (EDIT)
    sim_host, sim_port = re.fullmatch(r"http://([^:/]+):(\d+)", target).groups()
    names = ["llm-loadgen-k8s-sim", "llm-loadgen-k8s-master"] + [
        f"llm-loadgen-k8s-worker-{i}" for i in range(worker_job["spec"]["parallelism"])]
    for name in names:  # leftovers of an interrupted earlier run
        docker("rm", "-f", name, check=False)
    docker("network", "rm", NETWORK, check=False)
    docker("network", "create", "--label", LABEL, NETWORK)
    try:
        docker("run", "--detach", "--label", LABEL, "--network", NETWORK, "--network-alias", sim_host,
               "--name", names[0], "--entrypoint", "python", IMAGE, "-m", "loadgen.sim",
               "--host", "0.0.0.0", "--port", sim_port, "--preset", "fixed")
        docker("run", *pod_flags(mpod, master, names[1]), "--network-alias", "llm-loadgen-master",
               "-e", f"POD_NAME={POD_NAME}", "-v", f"{scenario}:{mounts['scenario']}:ro",
               "-v", f"{results}:{mounts['results']}", IMAGE, *expand(master["args"], {"POD_NAME": POD_NAME}))
        for name in names[2:]:
            docker("run", *pod_flags(wpod, worker, name), "-v", f"{scenario}:{mounts['scenario']}:ro",
                   IMAGE, *worker["args"])
        deadline = time.monotonic() + 180
        while "llm-loadgen: stage 0" not in logs(names[1]):
            state = json.loads(docker("inspect", names[1]).stdout)[0]["State"]
            assert state["Running"] and time.monotonic() < deadline, logs(names[1])[-3000:]
            time.sleep(1)
        docker("stop", "--time", "60", names[1], timeout_s=90)  # SIGTERM, as kubectl delete
        codes = {n: int(docker("wait", n, timeout_s=90).stdout) for n in names[1:]}
        master_log = logs(names[1])
    finally:
        docker("rm", "-f", *names, check=False)
        docker("network", "rm", NETWORK, check=False)
    left = docker("ps", "-a", "-q", "--filter", f"label={LABEL}").stdout.split()
    return {"results": results / POD_NAME, "codes": codes, "master_log": master_log,
            "names": names, "left": left, "target": target}


def test_k8s_master_writes_its_run_under_its_pod_name(k8s_run):
    path: Path = resolve_run_dir(k8s_run["results"]) / "summary.json"  # <pod name>/<run folder>/
    assert path.is_file(), k8s_run["master_log"][-3000:]
    assert path.stat().st_uid == LOADGEN_UID
    run = json.loads(path.read_text())["run"]
    assert run["workers"] == len(k8s_run["names"]) - 2 and run["worker_losses"] == []
    assert run["host"] == k8s_run["target"] and run["model"] == "llmsim-fixed"
    # Stopped by SIGTERM mid-sweep: interrupted (130), results written anyway.
    assert run["exit_code"] == 130 == k8s_run["codes"][k8s_run["names"][1]]


def test_k8s_workers_exit_0_when_the_master_quits(k8s_run):
    workers = k8s_run["names"][2:]
    assert [k8s_run["codes"][n] for n in workers] == [0] * len(workers), k8s_run["codes"]
    assert k8s_run["left"] == []
