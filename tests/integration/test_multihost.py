"""Master, workers and server on separate "hosts": network namespaces on a bridge (tests/support/netns.py).

Each test builds its own lab (server 10.213.X.1, master .2, workers .3…; tests/support/netcluster.py),
runs the built-in simulator in the server namespace and real ``locust -f locustfile.py --master`` /
``--worker`` processes in theirs, and removes everything at the end. Latency between master and
workers comes from tests/support/netlag.py (a delaying TCP relay in each worker's namespace; this kernel
has no netem).

Beyond the master's own figures, two outside witnesses: the simulator's counters (every request it
completed, every token it generated) and the kernel timestamp of every request leaving a worker
(a packet tap), plus, with the relay, when each phase broadcast left the master and reached a worker.

Three runs whose checks are counts with no timing in them (the exact-merge sweep, the master
SIGKILL, the Ctrl-C over a slow link: its 4 cancelled requests are 4 users each in a 0.6 s request,
the next sent as one ends) go side by side in threads (``beside``), each test reading its run's result
(``ran``), beside the late-join run once its join is over; the others (losses booked against a
window, phase edges) run alone after them.
"""

from __future__ import annotations

import json
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.netcluster import (
    assert_exact_merge,
    assert_server_agrees,
    from_workers,
    lab_net,
    merged,
    stage_users,
)
from tests.support.netlag import read_log

EXPORTER_PORT = 9646  # the master's exporter, on its own 127.0.0.1 (a namespace of its own)
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s")  # a stage row of the table printed as each stage finishes
integration = pytest.mark.integration


@pytest.fixture
def net(tmp_path, beside):
    """``net(subnet, workers)`` -> a ``Net`` for this test, torn down after it; the side-by-side
    runs are over before it starts (this test runs alone)."""
    wait(beside().values())
    with ExitStack() as stack:
        yield lambda subnet, workers: stack.enter_context(lab_net(tmp_path / "results", subnet, workers))


@pytest.fixture(scope="module")
def beside(request, tmp_path_factory):
    """``start()`` -> {test name: future} of the ``BESIDE`` runs of the selected tests, started (in
    threads) at the first call."""
    asked = {item.originalname for item in request.session.items if item.module is request.module} & BESIDE.keys()
    started: dict = {}
    with ThreadPoolExecutor(max_workers=len(BESIDE)) as pool:
        def start() -> dict:
            if not started:
                started.update({name: pool.submit(BESIDE[name], tmp_path_factory.mktemp("beside")) for name in asked})
            return started

        yield start


@pytest.fixture
def ran(request, beside) -> dict:
    """What this test's side-by-side run returned."""
    return beside()[request.node.originalname].result()


# -- (b) a worker that joins 20 s into the run -------------------------------------------------------------
LATE_S = 20.0
LATE_STAGES = (1, 2, 4, 8, 16)


@pytest.fixture(scope="module")
def late_run(tmp_path_factory, beside):
    """One run: --expect-workers 1 starts it with w0; w1 joins >= 20 s later, mid-window.

    w1's process starts with the others but dials a relay on its own 127.0.0.1 that only comes up
    at the join (a host whose network comes up late): its imports cannot delay the join by an
    unknown few seconds, and the join never falls on a ramp's dispatch (Locust re-dispatches the
    running users on a join only outside one). A tap in each worker counts every request sent.
    The side-by-side runs start 5 s after the join: a busy CPU would widen the instant in which the
    server has finished a request that the join's re-dispatch is cutting (held to its counters).
    """
    tmp = tmp_path_factory.mktemp("late")
    with lab_net(tmp / "results", subnet=2, workers=2) as n:
        taps = [n.tap(w) for w in n.workers]
        n.start_master(1, "--stages", ",".join(map(str, LATE_STAGES)), "--stage-duration", "5")
        n.start_worker(n.workers[0])
        n.start_worker(n.workers[1], via_relay=True)
        n.wait_after(r"stage 0 C=1: ramp", LATE_S)
        # a stage lasts >= 7 s (ramp tick, warmup >= 1 s, window 5 s): 1.5-4 s after a ramp is mid-stage
        while not 1.5 <= time.monotonic() - max(t for t, line in n.lines if ": ramp" in line) <= 4:
            time.sleep(0.1)
        joined_at = time.monotonic()
        n.relay(n.workers[1], delay_ms=0, jitter_ms=0, seed=0)
        time.sleep(5)  # the join and its re-dispatch take under 3 s (the test below needs a ramp after that)
        beside()
        code = n.wait_master()
        yield {"net": n, "code": code, "joined_at": joined_at, "summary": n.summary(), "ledgers": n.ledgers(),
               "server": n.server_counters(), "sent": sum(len(read_log(t)) for t in taps)}


@integration
@pytest.mark.timeout(180)
def test_a_worker_joining_20_s_late_takes_users_and_merges_exactly(late_run):
    n, s, parts = late_run["net"], late_run["summary"], late_run["ledgers"]
    assert late_run["code"] == 0, n.stderr()[-3000:]
    ramps = {int(m.group(1)): t for t, line in n.lines if (m := re.search(r"stage (\d+) C=\d+: ramp", line))}
    later = [k for k, t in ramps.items() if t > late_run["joined_at"] + 3]
    assert later, f"no stage ramped after the late worker joined (ramps {ramps}, joined {late_run['joined_at']})"
    assert s["run"]["workers"] == 2 and s["run"]["worker_losses"] == []
    assert stage_users(s) == [(c, c) for c in LATE_STAGES]
    assert len(parts) == 2 and all(p.requests_ok > 0 for p in parts.values()), "the late worker did no work"
    assert_exact_merge(s, merged(parts.values()))
    t = s["totals"]  # a request cut at the join may have finished at the server (assert_server_agrees)
    assert t["requests"] <= late_run["server"]["completed"] <= t["requests"] + t["cancelled_requests"]


@integration
def test_a_late_join_loses_no_request(late_run):
    """Locust re-dispatches the running users when a worker joins; the old worker kills the users
    it gives up, mid-request. Those requests are counted (``cancelled_requests``), not lost."""
    t = from_workers(late_run["summary"])  # the master's own start probe left no worker
    cancelled = late_run["summary"]["totals"]["cancelled_requests"]
    assert late_run["sent"] == t["requests"] + sum(t["errors"].values()) + cancelled, (
        f"{late_run['sent']} requests left the workers, the master accounts for "
        f"{t['requests']} ok + {sum(t['errors'].values())} failed + {cancelled} cut by the client")
    assert_server_agrees(late_run["summary"], late_run["server"])


# -- (a) a full sweep across hosts: the merge is exact ---------------------------------------------------
def run_sweep(tmp: Path) -> dict:
    with lab_net(tmp / "results", subnet=1, workers=2) as n:
        n.start_master(2, "--stages", "2,4,8", "--stage-duration", "3")
        for w in n.workers:
            n.start_worker(w)
        code = n.wait_master()
        return {"code": code, "stderr": n.stderr(), "summary": n.summary(), "ledgers": n.ledgers(),
                "server": n.server_counters()}


@integration
@pytest.mark.timeout(150)
def test_sweep_across_hosts_merges_exactly(ran):
    assert ran["code"] == 0, ran["stderr"][-3000:]
    s, parts = ran["summary"], ran["ledgers"]
    assert s["run"]["workers"] == 2 and s["run"]["worker_losses"] == []
    assert stage_users(s) == [(2, 2), (4, 4), (8, 8)]
    assert all(st["requests"] > 0 and st["error_count"] == 0 for st in s["stages"])
    assert len(parts) == 2 and all(p.requests_ok > 0 for p in parts.values())
    assert_exact_merge(s, merged(parts.values()))
    assert_server_agrees(s, ran["server"])


# -- (e) the master SIGKILLed mid-run ---------------------------------------------------------------------
def printed_rows(lines: list[tuple[float, str]]) -> list[tuple[float, int]]:
    """(time printed, concurrency) of each stage row the master printed as a stage finished."""
    header = next((i for i, (_, line) in enumerate(lines) if "TTFT p50" in line), None)
    if header is None:
        return []
    return [(t, int(m.group(1))) for t, line in lines[header + 1:] if (m := ROW.match(line))]


def run_master_kill(tmp: Path) -> dict:
    """A sweep whose master is SIGKILLed once summary.json holds 3 stages; what was left."""
    stages = (2, 4, 8, 16, 32)
    with lab_net(tmp / "results", subnet=5, workers=2) as n:
        n.start_master(2, "--stages", ",".join(map(str, stages)), "--stage-duration", "3")
        for w in n.workers:
            n.start_worker(w)
        path, seen = n.results / "latest" / "summary.json", []  # stages in summary.json, each time it changed
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and n.master_proc.poll() is None:
            if path.exists():
                count = len(json.loads(path.read_text())["stages"])
                if not seen or seen[-1] != count:
                    seen.append(count)
                if count >= 3:
                    break
            time.sleep(0.05)
        killed_at = time.monotonic()
        n.lab.kill(n.master_proc)
        n.master_proc.wait(10)
        time.sleep(0.3)  # the reader thread takes the last lines
        s = n.summary()
        before = n.server_counters()["completed"]
        time.sleep(3)
        after = n.server_counters()["completed"]
        alive = [w.name for w in n.workers if n.worker_procs[w.name].poll() is None]
        return {"stages": stages, "seen": seen, "killed_at": killed_at, "summary": s, "lines": list(n.lines),
                "completed_after_s": after - before, "alive": alive}


@integration
@pytest.mark.timeout(150)
def test_a_master_killed_mid_run_leaves_every_completed_stage(ran):
    s, seen, stages = ran["summary"], ran["seen"], ran["stages"]
    rows = printed_rows(ran["lines"])
    written, printed = [st["concurrency"] for st in s["stages"]], [c for _, c in rows]
    assert seen == list(range(seen[0], 4)), f"summary.json not rewritten once per stage: {seen}"
    assert s["run"]["ended_at"] is None and s["run"]["exit_code"] is None  # it never got to finish
    # every stage printed is in the file, but one printed in the instant before the kill
    assert written == printed or (written == printed[:-1] and rows[-1][0] > ran["killed_at"] - 0.5), (written, rows)
    assert len(written) >= 3 and written == list(stages[:len(written)])
    assert all(st["requests"] > 0 and st["users"] == st["concurrency"] for st in s["stages"])
    print(f"summary.json stage counts seen: {seen}; rows printed {printed}; "
          f"workers still running after the master died: {ran['alive']}, "
          f"requests the server completed in the 3 s after: {ran['completed_after_s']:.0f}")


# -- (c) a worker killed, another joining ----------------------------------------------------------------
@integration
@pytest.mark.timeout(180)
def test_a_killed_worker_is_recorded_and_a_new_one_carries_the_run(net):
    n = net(subnet=3, workers=3)
    n.start_master(2, "--stages", "4,8", "--stage-duration", "10")
    victim = n.start_worker(n.workers[0])
    n.start_worker(n.workers[1])
    n.start_worker(n.workers[2], via_relay=True)  # joins once its relay is up
    # stage 0's window opens 2-3 s after its ramp and lasts 10 s; the victim is killed 4.5 s in, so
    # one of its reports (every 3 s) came after its first 0.6 s requests had finished; the loss is
    # noticed 3-5 s after, and the new worker joins while stage 0 runs (Locust gives it users at
    # once), seconds before stage 1's ramp. Killed 3 s in, with a 6 s
    # window the join fell on stage 1's dispatch on a loaded machine: Locust adds a worker joining
    # mid-dispatch to the next dispatch only, there was none, and the new worker did nothing (its
    # empty ledger written under the default results folder: it never had the master's options).
    n.wait_after(r"stage 0 C=4: ramp", 4.5)
    killed_at = time.monotonic()
    n.lab.kill(victim)
    lost_at = n.wait_line(r"lost during stage", timeout_s=30)
    n.relay(n.workers[2], delay_ms=0, jitter_ms=0, seed=0)
    assert n.wait_master() == 0, n.stderr()[-3000:]
    s, parts = n.summary(), n.ledgers()
    assert s["run"]["stop_reason"] == "completed" and s["run"]["ended_at"] is not None
    (loss,) = s["run"]["worker_losses"]
    assert loss["worker"] not in parts and len(parts) == 2, (
        f"the survivors wrote ledgers, the killed one none: {loss}, {list(parts)}\n{n.worker_logs()}")
    assert all(p.requests_ok > 0 for p in parts.values()), "the joining worker did no work"
    assert s["run"]["workers"] == 3
    assert loss["stage"] == 0 and loss["concurrency"] == 4
    assert [st["concurrency"] for st in s["stages"]] == [4, 8]
    assert stage_users(s)[1:] == [(8, 8)], "the stage after the join has every user"
    survivors = merged(parts.values())
    shipped = from_workers(s)
    assert shipped["requests"] > survivors.requests_ok, "what the killed worker reported stays counted"
    assert shipped["histogram_counts"]["ttft_s"] > survivors.ttft_s.count
    print(f"loss recorded {lost_at - killed_at:.1f} s after the SIGKILL")


@integration
@pytest.mark.timeout(150)
def test_a_worker_lost_mid_window_is_booked_against_that_stage(net):
    n = net(subnet=6, workers=2)
    n.start_master(2, "--stages", "4,8", "--stage-duration", "4", "--exporter-port", str(EXPORTER_PORT))
    n.start_worker(n.workers[0])
    quiet = n.start_worker(n.workers[1], locustfile="tests/fixtures/quiet_worker_locustfile.py")
    # the loss is booked in the phase the master was in when it last heard the worker (heartbeats
    # every second): kill it 2 s into stage 0's window. A fixed 3.5 s after the ramp fell in the
    # warmup once on a loaded machine: the quiet worker never reports, so the turnover waits for the
    # other worker's report (every 3 s) to count the finished requests that end the warmup.
    time.sleep(max(0.0, n.wait_phase(EXPORTER_PORT, 0, "measure") + 2 - time.monotonic()))
    n.lab.kill(quiet)
    assert n.wait_master() == 0, n.stderr()[-3000:]
    s = n.summary()
    (loss,) = s["run"]["worker_losses"]
    # its only report predates the window; heartbeats told the master it ran 2 users until it died
    assert (loss["stage"], loss["phase"], loss["reason"]) == (0, "measure", "stopped_reporting"), loss
    assert loss["inflight_lost"] == loss["users"] == 2, loss
    assert (loss["inflight_lost_is"], loss["inflight_lost_from"]) == ("at_most", "users"), loss
    assert loss["last_report_at"] < loss["last_heard_at"] <= loss["at"], loss
    assert "worker_lost" in s["stages"][0]["flags"] and s["stages"][0]["lost_requests"] == 2, s["stages"][0]
    assert "worker_lost" not in s["stages"][1]["flags"], "stage 1 ran after the loss: nothing of it was lost"
    print(f"loss booked: {loss}")


def run_stopped_over_slow_link(tmp: Path) -> dict:
    """One worker behind a 600 ms RTT link, the master Ctrl-C'd mid-window; what it merged."""
    with lab_net(tmp / "results", subnet=7, workers=1) as n:
        n.relay(n.workers[0], delay_ms=300, jitter_ms=0, seed=0)
        n.start_master(1, "--stages", "4,8", "--stage-duration", "30")
        n.start_worker(n.workers[0], via_relay=True, locustfile="tests/fixtures/quiet_worker_locustfile.py")
        n.wait_after(r"stage 0 C=4: ramp", 5)
        stopped_at = time.monotonic()
        n.lab.kill(n.master_proc, signal.SIGINT)  # Ctrl-C: results written, workers told to quit
        n.master_proc.wait(60)
        exited_s = time.monotonic() - stopped_at
        return {"code": n.wait_master(), "stderr": n.stderr(), "summary": n.summary(), "ledgers": n.ledgers(),
                "exited_s": exited_s, "workers_log": n.worker_logs()}


@integration
@pytest.mark.timeout(120)
def test_a_stopped_run_merges_every_final_report_over_a_slow_link(ran):
    s, parts = ran["summary"], ran["ledgers"]
    assert ran["code"] == 130, ran["stderr"][-3000:]
    assert len(parts) == 1 and merged(parts.values()).requests_ok > 0, "the worker's ledger"
    assert_exact_merge(s, merged(parts.values()))
    # the Ctrl-C cut the 4 requests in flight: counted by the worker, shipped in its final report
    assert s["totals"]["cancelled_requests"] == 4 and s["run"]["worker_losses"] == [], (
        s["run"], ran["stderr"][-2000:], ran["workers_log"])
    assert "no final report" not in ran["stderr"]
    print(f"merged {from_workers(s)['requests']} requests and {s['totals']['cancelled_requests']} cancelled from "
          f"the final report over a 600 ms RTT link; the master exited {ran['exited_s']:.2f} s after the Ctrl-C")


BESIDE = {"test_sweep_across_hosts_merges_exactly": run_sweep,
          "test_a_master_killed_mid_run_leaves_every_completed_stage": run_master_kill,
          "test_a_stopped_run_merges_every_final_report_over_a_slow_link": run_stopped_over_slow_link}


# -- (d) 50 ms RTT between master and workers ---------------------------------------------------------------
DELAY_MS, JITTER_MS = 25.0, 5.0  # each way: RTT 50 ms ± 10 ms
TOL_S = 0.030  # a worker adopts a phase a little after the relay wrote it; a request leaves a little
#                after its stage was read: sends this close to an edge may count on either side


def window(phases: list[dict], stage: int, key: str) -> tuple[float, float]:
    """(open, close) of ``stage``'s window in a relay's phase log: ``t_in`` as the master sent the
    phases, ``t_out`` as the worker received them."""
    seqs = sorted(phases, key=lambda p: p["seq"])
    i = next(i for i, p in enumerate(seqs) if p["stage"] == stage and p["kind"] == "measure")
    return seqs[i][key], seqs[i + 1][key]


def sent_between(sends: list[float], a: float, b: float) -> int:
    return sum(1 for t in sends if a <= t < b)


@integration
@pytest.mark.timeout(150)
def test_50_ms_rtt_moves_stage_membership_by_no_more_than_the_broadcast_delay(net):
    n = net(subnet=4, workers=2)
    logs = [(n.relay(w, DELAY_MS, JITTER_MS, seed=i), n.tap(w)) for i, w in enumerate(n.workers)]
    stages = (8, 16, 32)
    n.start_master(2, "--stages", ",".join(map(str, stages)), "--stage-duration", "4", "--ramp", "1")
    for w in n.workers:
        n.start_worker(w, via_relay=True)
    assert n.wait_master() == 0, n.stderr()[-3000:]
    s = n.summary()
    assert stage_users(s) == [(c, c) for c in stages]
    per_worker = [(read_log(p), sorted(e["t"] for e in read_log(t))) for p, t in logs]
    delays_ms = sorted((p["t_out"] - p["t_in"]) * 1e3 for phases, _ in per_worker for p in phases)
    assert delays_ms[0] >= DELAY_MS - JITTER_MS - 1, "a phase reached a worker sooner than the relay allows"
    for st in s["stages"]:
        k, reported = st["index"], st["requests"] + st["error_count"]
        lo = hi = nolat = near = 0
        for phases, sends in per_worker:
            (o_in, c_in), (o_out, c_out) = window(phases, k, "t_in"), window(phases, k, "t_out")
            lo += sent_between(sends, o_out + TOL_S, c_out - TOL_S)
            hi += sent_between(sends, o_out - TOL_S, c_out + TOL_S)
            nolat += sent_between(sends, o_in, c_in)  # what a worker with no delay would have counted
            near += sent_between(sends, o_in - TOL_S, o_out + TOL_S) + sent_between(sends, c_in - TOL_S, c_out + TOL_S)
        print(f"stage {k} C={st['concurrency']}: reported {reported}, sent in the worker-seen window "
              f"{lo}..{hi}, with no delay {nolat}; moved {abs(reported - nolat)}, sent within the "
              f"broadcast delay of an edge {near}")
        assert lo <= reported <= hi, "the stage counts requests by the phase its worker knew when sending"
        assert abs(reported - nolat) <= near
    print(f"phase broadcast delay master -> worker: p50 {delays_ms[len(delays_ms) // 2]:.1f} ms, "
          f"max {delays_ms[-1]:.1f} ms over {len(delays_ms)} phases")
