"""A throw-away network of Linux network namespaces, so one machine looks like several hosts.

``Lab(subnet)`` makes a *switch* namespace holding a bridge ``br0``; ``lab.host("master")`` makes
one more namespace joined to that bridge by a veth pair (``eth0`` inside the host, ``sw-<name>`` on
the bridge), with ``lo`` up and the address ``10.213.<subnet>.<n>/24`` (n = 1, 2, … in creation
order). ``lab.popen(host, argv)`` runs a process inside a host with ``ip netns exec``. Nothing is
created in the root namespace: the veths are made inside the switch namespace, their peers born in
the host namespaces, so the only traffic is between addresses of this lab.

Names are ``lgnet-<pid>-<lab>-<host>`` (pid of the test process, a per-process lab counter), so labs
of concurrent test runs never meet. ``Lab.close()`` always runs (pytest finalizer, and ``atexit``
for a run stopped with Ctrl-C): it kills every process it started (and anything else still inside
its namespaces), deletes the veths, then the namespaces. At start, ``sweep_stale()`` removes
``lgnet-*`` namespaces whose creating pid is dead (a run that was SIGKILLed).

``tc netem`` is not available on every kernel (this machine's has no ``sch_netem``), so latency is
added in user space by ``tests.support.netlag`` (a delaying TCP relay) instead.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass

import pytest

PREFIX = "lgnet"
STALE = re.compile(rf"^{PREFIX}-(\d+)-\d+-")
_labs = itertools.count()
_probes = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def namespaces() -> list[str]:
    """Names of the network namespaces that exist now (``ip netns list``)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(ns: str) -> None:
    """SIGKILL every process still inside namespace ``ns`` (all were started by a lab)."""
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def sweep_stale() -> list[str]:
    """Delete ``lgnet-<pid>-…`` namespaces left by test processes that no longer run."""
    removed = []
    for ns in namespaces():
        m = STALE.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            _kill_inside(ns)
            _ip("netns", "del", ns, check=False)
            removed.append(ns)
    return removed


def require_netns() -> None:
    """Skip the calling test, with the reason, when this machine cannot make namespaces."""
    if os.geteuid() != 0:
        pytest.skip("network-namespace tests need root (ip netns add); run them as root (CI does)")
    if shutil.which("ip") is None:
        pytest.skip("network-namespace tests need iproute2's `ip` (apt-get install iproute2)")
    probe = f"{PREFIX}-{os.getpid()}-probe{next(_probes)}"  # labs made side by side probe apart
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"`ip netns add` failed here ({made.stderr.strip()}): no network namespaces")
    veth = subprocess.run(["ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"],
                          capture_output=True, text=True)
    _ip("netns", "del", probe, check=False)
    if veth.returncode != 0:
        pytest.skip(f"veth pairs cannot be made here ({veth.stderr.strip()})")


@dataclass(frozen=True)
class Host:
    name: str  # role in the lab: server, master, w0, ...
    ns: str  # the namespace's name
    ip: str  # its address on the lab's bridge


class Lab:
    """Namespaces on one bridge, and the processes run inside them (see the module docstring)."""

    def __init__(self, subnet: int):
        if not 0 <= subnet <= 255:
            raise ValueError(f"subnet must be 0..255 (10.213.<subnet>.0/24), got {subnet}")
        sweep_stale()
        self.subnet = subnet
        self.prefix = f"{PREFIX}-{os.getpid()}-{next(_labs)}"
        self.switch = f"{self.prefix}-switch"
        self.hosts: dict[str, Host] = {}
        self.procs: list[subprocess.Popen] = []
        self._ports: list[str] = []  # bridge-side veth names
        self._closed = False
        atexit.register(self.close)
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def host(self, name: str) -> Host:
        """A new namespace on the bridge, address ``10.213.<subnet>.<n>``; ``name`` ≤ 12 chars."""
        if name in self.hosts or not re.fullmatch(r"[a-z0-9]{1,12}", name):
            raise ValueError(f"host name must be new and [a-z0-9]{{1,12}} (veth name limit), got {name!r}")
        ns, port = f"{self.prefix}-{name}", f"sw-{name}"
        ip = f"10.213.{self.subnet}.{len(self.hosts) + 1}"
        _ip("netns", "add", ns)
        self.hosts[name] = host = Host(name, ns, ip)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._ports.append(port)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        return host

    def popen(self, host: Host, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside ``host`` (its own session, so its children can be found)."""
        proc = subprocess.Popen(["ip", "netns", "exec", host.ns, *argv], start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, host: Host, argv: list[str], timeout_s: float = 30) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``host`` to its end (bounded)."""
        return subprocess.run(["ip", "netns", "exec", host.ns, *argv], capture_output=True, text=True,
                              timeout=timeout_s)

    @staticmethod
    def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a process this lab started (and its process group)."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Kill the processes, delete the veths and the namespaces. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        for proc in self.procs:
            self.kill(proc)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for ns in [h.ns for h in self.hosts.values()] + [self.switch]:
            _kill_inside(ns)
        for port in self._ports:
            _ip("-n", self.switch, "link", "del", port, check=False)
        for ns in [h.ns for h in self.hosts.values()] + [self.switch]:
            _ip("netns", "del", ns, check=False)
        atexit.unregister(self.close)

    def leftovers(self) -> list[str]:
        """Namespaces of this lab that still exist (empty after ``close``)."""
        return [ns for ns in namespaces() if ns.startswith(self.prefix + "-")]

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
