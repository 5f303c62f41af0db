"""`make test`: the unit tests in one pytest process and the integration test files, side by side.

Most integration tests wait on real processes (a simulator's stages, a locust run's windows), not
on the CPU, so files run side by side take a fraction of the wall time: on this 2-core machine four
at a time (``--jobs 4``, the default) took the suite to ~540 s, against ~600 s at three and ~870 s
at two (docs/development/benchmarks-log.md, 'The test suite'). pytest-xdist cannot be used:
locust monkey-patches threading with gevent at import, and xdist's worker threads then block
forever. Instead, each integration file (``tests/integration/``) runs in its own pytest process, ``--jobs`` processes at
once: the unit tests first (they fail fastest), beside them the integration files slowest first
(per-file times from the last run, kept in ``.pytest_cache``; on a fresh clone those of
``tests/integration/file_seconds.json``, and a file in neither by its size), then the files marked
``solo`` (``pytestmark`` with ``pytest.mark.solo``: they time against a known answer), ``--solo-jobs`` at a time (default two) with nothing else beside them. A
solo file needs the CPU at the instants its client and simulator wake, not much of it (a tenth to a
half of one core, the CPU seconds printed for each file say), so two of them leave a core free at
most instants (they passed so beside a process burning a core, too).
A solo file also marked ``alone`` (``pytest.mark.alone``: it burns a core on purpose) runs last,
with no other file beside it.

Each file's output is printed whole when it fails, and as one line (wall and CPU seconds) when it
passes. The exit code is 0 only when every pytest process passed (or had no test to run).

    .venv/bin/python scripts/run_tests.py [--jobs 4] [--solo-jobs 2] [test files] [pytest args, e.g. -k ttft]

Test files named on the command line (``tests/integration/test_tls_e2e.py``) limit the run to them, each still in
its own process; other arguments go to every pytest process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / ".pytest_cache" / "llm-loadgen-file-seconds.json"
# Per-file times of a quiet fresh-clone run at the defaults, for an order that starts the slowest
# files first where no run has left times yet (a fresh clone: CI); refresh it by copying TIMES.
SEED_TIMES = ROOT / "tests" / "integration" / "file_seconds.json"
EXCLUDED = ("test_deploy_docker",)  # make test-deploy runs these
NO_TESTS = 5  # pytest's exit code when nothing was collected (a file whose tests are all unit tests)


def integration_files() -> list[Path]:
    """The files under tests/integration/ (tests/conftest.py marks their tests ``integration``)."""
    files = sorted((ROOT / "tests" / "integration").glob("test_*.py"))
    return [f for f in files if not f.name.startswith(EXCLUDED)]


def name_of(path: Path) -> str:
    return str(path.relative_to(ROOT))


def is_solo(path: Path) -> bool:
    return re.search(r"pytest\.mark\.solo\b", path.read_text()) is not None


def is_alone(path: Path) -> bool:
    """A solo file that no other file may run beside (``pytest.mark.alone``: e.g. it burns a core)."""
    return re.search(r"pytest\.mark\.alone\b", path.read_text()) is not None


def run_order(files: list[Path], seconds: dict[str, float]) -> list[Path]:
    """The shared files slowest first (known files by their last time, unknown ones by size: a fair
    proxy), then the solo files, slowest first too, those that must run alone last."""
    return sorted(files, key=lambda f: (not is_solo(f), not is_alone(f), seconds.get(f.name, -1.0), f.stat().st_size),
                  reverse=True)


def summary_line(output: str) -> str:
    lines = [ln.strip("= ") for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def to_start(queued: list[str], running: list[str], solo: set[str], jobs: int, solo_jobs: int,
             alone: frozenset[str] = frozenset()) -> list[str]:
    """The queued names (in queue order: the shared ones first) to start now, given the running
    ones: up to ``jobs`` shared processes; once none is left, up to ``solo_jobs`` solo files, and
    each of the ``alone`` ones (solo files too) with nothing beside it."""
    start: list[str] = []
    busy = len(running)
    solo_busy = any(r in solo for r in running)
    for name in queued:
        if name in solo:
            if (busy and not solo_busy) or busy >= solo_jobs or any(r in alone for r in [*running, *start]):
                break  # the shared processes first; then the solo files, solo_jobs at a time
            if name in alone and busy:
                break
            solo_busy = True
        elif busy >= jobs:
            break
        start.append(name)
        busy += 1
    return start


class Job:
    def __init__(self, name: str, args: list[str]):
        self.name, self.args = name, args
        self.log = (ROOT / ".pytest_cache" / f"run-{name.replace('/', '_')}.log").open("w+")
        self.started = self.ended = time.monotonic()
        self.cpu_s = 0.0  # CPU seconds of the process and the descendants it waited for, once reaped
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=ROOT,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def poll(self) -> bool:
        """Whether the process ended; if so, reap it and keep its CPU time (the children's
        rusage grows by exactly this process's when it is reaped here, in this one thread)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if self.proc.poll() is None:
            return False
        self.ended = time.monotonic()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return True

    def finish(self) -> tuple[bool, float, str]:
        self.log.seek(0)
        output = self.log.read()
        self.log.close()
        return self.proc.returncode in (0, NO_TESTS), self.ended - self.started, output


def load_text() -> str:
    """The machine's 1, 5 and 15 min load averages: other work on the cores slows a run's files."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def span_seconds(jobs: list[Job]) -> float:
    """From the first start to the last end of ``jobs`` (0 for none)."""
    return max(j.ended for j in jobs) - min(j.started for j in jobs) if jobs else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "4")),
                    help="shared processes at once (default 4, or $TEST_JOBS)")
    ap.add_argument("--solo-jobs", type=int, default=int(os.environ.get("TEST_SOLO_JOBS", "2")),
                    help="solo files at once, after the others (default 2, or $TEST_SOLO_JOBS)")
    opts, extra = ap.parse_known_args(argv)
    if opts.jobs < 1 or opts.solo_jobs < 1:
        ap.error(f"--jobs and --solo-jobs must be at least 1, got {opts.jobs} and {opts.solo_jobs}")
    chosen = {(ROOT / a).resolve() for a in extra if a.endswith(".py") and (ROOT / a).is_file()}
    extra = [a for a in extra if not (a.endswith(".py") and (ROOT / a).resolve() in chosen)]
    TIMES.parent.mkdir(exist_ok=True)
    seconds = json.loads(SEED_TIMES.read_text()) if SEED_TIMES.exists() else {}
    seconds.update(json.loads(TIMES.read_text()) if TIMES.exists() else {})
    common = ["-q", "-ra", "-p", "no:cacheprovider", *extra]
    failed: list[str] = []
    t0 = time.monotonic()
    load_at_start = load_text()

    def report(job: Job) -> None:
        ok, took, output = job.finish()
        seconds[Path(job.name).name] = round(took, 1)
        print(f"{'ok  ' if ok else 'FAIL'} {job.name:<46} {took:6.1f} s  cpu {job.cpu_s:5.1f} s  "
              f"{summary_line(output)}", flush=True)
        if not ok:
            failed.append(job.name)
            print(output, flush=True)

    only = [str(f) for f in sorted(chosen)] or [f"--ignore-glob=tests/integration/{e}*" for e in EXCLUDED]
    files = run_order([f for f in integration_files() if not chosen or f.resolve() in chosen], seconds)
    solo = {name_of(f) for f in files if is_solo(f)}
    alone = frozenset(name_of(f) for f in files if is_solo(f) and is_alone(f))
    args = {"unit": [*common, "-m", "not integration", *only]}
    args.update({name_of(f): [*common, "-m", "integration", name_of(f)] for f in files})
    queue = list(args)
    print(f"unit tests in one process and {len(files)} integration files, {opts.jobs} processes at a time "
          f"(then {len(solo)} solo files, {opts.solo_jobs} at a time, with nothing else beside them; "
          f"{len(alone)} of them alone):", flush=True)
    running: list[Job] = []
    done: list[Job] = []
    while queue or running:
        for job in [j for j in running if j.poll()]:
            running.remove(job)
            done.append(job)
            report(job)
        for name in to_start(queue, [j.name for j in running], solo, opts.jobs, opts.solo_jobs, alone):
            queue.remove(name)
            running.append(Job(name, args[name]))
        time.sleep(0.2)

    TIMES.write_text(json.dumps(seconds, indent=1, sort_keys=True))
    took = time.monotonic() - t0
    shared_s = span_seconds([j for j in done if j.name not in solo])
    solo_s = span_seconds([j for j in done if j.name in solo])
    cpu_s = sum(j.cpu_s for j in done)
    print(f"shared phase {shared_s:.0f} s, solo phase {solo_s:.0f} s, {cpu_s:.0f} CPU seconds in all; "
          f"load average {load_at_start} at the start, {load_text()} at the end", flush=True)
    if failed:
        print(f"FAILED after {took:.0f} s: {', '.join(failed)}", flush=True)
        return 1
    print(f"all passed in {took:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
