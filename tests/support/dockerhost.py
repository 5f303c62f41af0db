"""Test helpers: a Docker daemon, images built the air-gapped way, and a compose stack.

``DockerDaemon`` uses the daemon that answers on this machine, or starts ``dockerd`` and stops it
again (only the one it started). Its own daemon is set up to change as little as possible on a
shared host: no default bridge (``--bridge=none``), no iptables rules, no IP forwarding, no
masquerading; compose networks come from ``ADDRESS_POOL`` (172.29.0.0/16, /24 each), clear of
Docker's usual 172.17/16, of the 10.x addresses used inside other tests' network namespaces, and
of this host's own networks. Containers on one compose network talk over its bridge; the host
reaches published ports through docker-proxy on 127.0.0.1; nothing routes to anywhere else.

``build_image`` runs the classic builder (``DOCKER_BUILDKIT=0``, ``--network host`` so RUN steps
reach the package mirrors) with build arguments passed by name through the environment, never on
a command line. ``pip_build_args``/``apt_build_args`` read this machine's own pip and apt settings
(index URLs, a TLS-inspecting proxy's CA) for the Dockerfiles' build stages, which keep them out
of the final images. ``ComposeStack`` runs the Compose v2 binary against deploy/compose with an
env file and a clean environment, so neither a local ``.env`` nor the shell's ``HOST`` leaks in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LLM_LOADGEN_CACHE", "/var/cache/llm-loadgen"))
COMPOSE_VERSION = "2.40.3"  # = scripts/ensure-docker.sh
COMPOSE_BIN = CACHE / "compose" / f"v{COMPOSE_VERSION}" / "docker-compose"
ADDRESS_POOL = "172.29.0.0/16"
DAEMON_FLAGS = ("--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
                f"--default-address-pool=base={ADDRESS_POOL},size=24")
LABEL = "org.llm-loadgen.deploy-test=1"  # on every image, network and container the tests make
IMAGE = "llm-loadgen:deploy-test"
PROM_IMAGE = "llm-loadgen-prometheus:deploy-test"
LOADGEN_UID = 10001  # the image's user (Dockerfile USER)
PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


class DockerUnavailable(Exception):
    """Docker cannot run here; the message says why and what to do (the tests skip with it)."""


def docker_cli() -> str | None:
    """The CLI of Debian's docker.io (matches its daemon's API), else any ``docker`` on PATH."""
    return "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else shutil.which("docker")


def run(cmd: list[str], timeout_s: float, check: bool = True, input: str | None = None,
        **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` with output captured; a failure raises with the command and its output's tail."""
    stdin = subprocess.DEVNULL if input is None else None
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, input=input,
                          stdin=stdin, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def docker(*args: str, timeout_s: float = 60, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return run([docker_cli() or "docker", *args], timeout_s, check, **kw)


class DockerDaemon:
    """The machine's daemon if one answers, else a ``dockerd`` started here and stopped on exit."""

    def __init__(self, log_dir: Path):
        self.log_path = log_dir / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def answers() -> bool:
        return docker_cli() is not None and docker("info", timeout_s=20, check=False).returncode == 0

    def __enter__(self) -> DockerDaemon:
        if os.geteuid() != 0:
            raise DockerUnavailable("needs root (starts dockerd, debootstraps the base image)")
        dockerd = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/bin")
        if docker_cli() is None or dockerd is None:
            raise DockerUnavailable("Docker is not installed: run `make docker-tools` "
                                    "(scripts/ensure-docker.sh installs Debian's docker.io)")
        if not COMPOSE_BIN.is_file():
            raise DockerUnavailable(f"Docker Compose v{COMPOSE_VERSION} not at {COMPOSE_BIN}: "
                                    "run `make docker-tools` (scripts/ensure-docker.sh)")
        if self.answers():
            return self
        log = open(self.log_path, "wb")  # noqa: SIM115 - the daemon writes it until stop()
        self.proc = subprocess.Popen([dockerd, *DAEMON_FLAGS], stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None or self.answers():
                break
            time.sleep(0.5)
        if self.proc.poll() is not None or not self.answers():
            self.stop()
            raise DockerUnavailable(f"dockerd did not start: {self.log_tail()}")
        return self

    def log_tail(self, n: int = 1500) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace") if self.log_path.exists() else ""

    @property
    def started_here(self) -> bool:
        return self.proc is not None

    def stop(self) -> None:
        """SIGTERM to the dockerd we started (it stops its containers and containerd), then wait."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        # dockerd leaves its bind mount of the host's network namespace behind on exit
        for mount in Path("/proc/mounts").read_text().splitlines():
            point = mount.split()[1]
            if point.startswith("/run/docker/netns/"):
                subprocess.run(["umount", point], capture_output=True, timeout=30)

    def __exit__(self, *exc) -> None:
        self.stop()


def base_image() -> str:
    """scripts/docker-base-image.sh --import: the debootstrap base's tag (made once, then cached)."""
    proc = run(["sh", str(ROOT / "scripts" / "docker-base-image.sh"), "--import"], timeout_s=900)
    return proc.stdout.strip().splitlines()[-1]


def pip_settings() -> dict[str, str]:
    """This machine's pip settings as pip resolves them (config files and PIP_* variables)."""
    proc = run([sys.executable, "-m", "pip", "config", "list"], timeout_s=60, check=False)
    out = {}
    for line in proc.stdout.splitlines():  # e.g. global.index-url='https://...' or :env:.cert='...'
        key, _, value = line.partition("=")
        out[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")
    return out


def extra_ca_pem(ca_file: str | None, image: str) -> str:
    """The certificates of ``ca_file`` that ``image``'s own bundle lacks (a proxy's CA), as PEM."""
    if not ca_file or not Path(ca_file).is_file():
        return ""
    ours = PEM.findall(Path(ca_file).read_text())
    theirs = set(PEM.findall(docker("run", "--rm", "--network", "none", "--entrypoint", "cat", image,
                                    "/etc/ssl/certs/ca-certificates.crt").stdout))
    return "\n".join(c for c in ours if c not in theirs)


def pip_build_args(base: str) -> dict[str, str]:
    """Build args for the Dockerfile's build stage: remote indexes (file:// ones are host paths a
    container cannot see) and the CA certificates pip trusts here that the base image lacks."""
    pip = pip_settings()
    remote = [u for u in pip.get("extra-index-url", "").split() if u.startswith(("http://", "https://"))]
    ca = pip.get("cert") or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
    args = {"PIP_INDEX_URL": pip.get("index-url", ""), "PIP_EXTRA_INDEX_URL": " ".join(remote),
            "PIP_TRUSTED_HOST": pip.get("trusted-host", ""), "PIP_CA_PEM": extra_ca_pem(ca, base)}
    return {k: v for k, v in args.items() if v}


def apt_build_args() -> dict[str, str]:
    """APT_OPTS for the Prometheus image's build stage: the proxy and validity settings apt uses here."""
    keys = ("Acquire::http::Proxy", "Acquire::https::Proxy", "Acquire::Check-Valid-Until",
            "Acquire::Check-Date")
    proc = run(["apt-config", "dump"], timeout_s=30, check=False)
    opts = []
    for line in proc.stdout.splitlines():  # Acquire::Check-Valid-Until "false";
        m = re.fullmatch(r'(\S+) "([^"\s]*)";', line.strip())
        if m and m.group(1) in keys:
            opts.append(f"-o {m.group(1)}={m.group(2)}")
    return {"APT_OPTS": " ".join(opts)} if opts else {}


def build_image(tag: str, dockerfile: Path, context: Path | None, args: dict[str, str],
                label: str, timeout_s: float = 1200) -> None:
    """Classic builder, RUN steps on the host network; ``context`` None sends no context at all.

    Values go through the environment (``--build-arg NAME``), not argv (``ps`` shows argv). The
    Dockerfile's ``build`` stage is built and tagged ``TAG-build`` first (the final build then takes
    it from the cache): tagged, it is the layer cache the next run reuses, and the stages a rebuild
    replaced become dangling images with ``label``, pruned here so repeated runs do not fill the disk.
    """
    env = {**os.environ, "DOCKER_BUILDKIT": "0", **args}
    for target, name in (("build", f"{tag}-build"), (None, tag)):
        cmd = ["build", "--network", "host", "--label", label, "-t", name]
        cmd += ["--target", target] if target else []
        for arg in args:
            cmd += ["--build-arg", arg]
        if context is None:
            docker(*cmd, "-", timeout_s=timeout_s, env=env, input=dockerfile.read_text())
        else:
            docker(*cmd, "-f", str(dockerfile), str(context), timeout_s=timeout_s, env=env)
    docker("image", "prune", "-f", "--filter", f"label={label}", timeout_s=120)


class ComposeStack:
    """``docker compose -p PROJECT --env-file ENV`` in deploy/compose, with a clean environment."""

    def __init__(self, project: str, env: dict[str, str], workdir: Path):
        self.project = project
        self.workdir = workdir
        self.env_file = Path(tempfile.mkstemp(prefix="llm-loadgen-compose-", suffix=".env")[1])
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))

    def compose(self, *args: str, timeout_s: float = 180, check: bool = True) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
        if os.environ.get("DOCKER_HOST"):
            env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
        return run([str(COMPOSE_BIN), "-p", self.project, "--env-file", str(self.env_file), *args],
                   timeout_s, check, cwd=self.workdir, env=env)

    def containers(self, service: str) -> list[str]:
        """Ids of the service's containers (running or exited), in replica order."""
        out = self.compose("ps", "-a", "--format", "json", service).stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [r["ID"] for r in sorted(rows, key=lambda r: r["Name"])]

    def wait_exit(self, container: str, timeout_s: float) -> int:
        return int(docker("wait", container, timeout_s=timeout_s).stdout.strip())

    def leftovers(self) -> dict[str, list[str]]:
        """What of this project still exists in the daemon (the label compose puts on everything)."""
        label = f"label=com.docker.compose.project={self.project}"
        return {kind: docker(*cmd, "--filter", label, "-q").stdout.split()
                for kind, cmd in (("containers", ("ps", "-a")), ("networks", ("network", "ls")),
                                  ("volumes", ("volume", "ls")))}

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", timeout_s=180)

    def close(self) -> None:
        self.env_file.unlink(missing_ok=True)


@dataclass
class Host:
    base: str
    image_size_mb: float
    build_args: dict[str, str]
    daemon_started_here: bool


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A Docker daemon with IMAGE and PROM_IMAGE built on the debootstrap base; skips when it cannot."""
    daemon = DockerDaemon(tmp_path_factory.mktemp("dockerd"))
    try:
        daemon.__enter__()
    except DockerUnavailable as exc:
        pytest.skip(f"container deploy test: {exc}")
    try:
        base = base_image()
        args = pip_build_args(base)
        build_image(IMAGE, ROOT / "Dockerfile", ROOT, {"BASE_IMAGE": base, **args}, LABEL)
        build_image(PROM_IMAGE, ROOT / "deploy" / "compose" / "prometheus.Dockerfile", None,
                    {"BASE_IMAGE": base, **apt_build_args()}, LABEL)
        size = int(docker("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
        yield Host(base, size / 1e6, args, daemon.started_here)
    finally:
        daemon.stop()
