"""Per-request timeline of a run against llama-server: the client's requests.jsonl joined with the
server's own log, to see how the server scheduled each request (docs/whatif.md 'Against llama.cpp').

    .venv/bin/python bench/llamacpp_timeline.py RUN_DIR SERVER_LOG [--stage K]

RUN_DIR: a run folder written with ``--requests-jsonl``; SERVER_LOG: llama-server's ``--log-file``
written with ``--log-timestamps --log-prefix`` (bench/validate_whatif_llamacpp.py keeps both). One
server log may hold several runs: the run's requests are matched to the log's tasks in order, from
the task launched closest after the run's first request (clock offset: the smallest launch - sent).

Per request: the user (closed loop: a request sent within ``--chain-ms`` of an earlier one's end
continues that user), sent (s from the run's first request), ``wait`` = launched - sent (the
server's main loop takes new tasks only between two batches: a request that arrives during a
batch waits for its end), the server's prompt time (its prompt step: ~1 ms a token when alone, twice
that when two prompts share a batch), ``with`` = another task launched within 1 ms (two prompts
in one batch), the client's TTFT and the request's end.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

RUN_GAP_S = 1.5  # no task launched for this long: the next run (a new load generator process)
LINE = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+) I slot (\w+): id +(\d+) \| task (-?\d+) \| (.*)")


def log_seconds(m: re.Match) -> float:
    """llama.cpp's --log-timestamps prefix MM.SS.mmm.uuu as seconds since the server started."""
    return int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6


def server_tasks(log: Path) -> list[dict]:
    """Each completion task: its slot, launch time and prompt time (ms), in launch order."""
    tasks: dict[int, dict] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if not m:
            continue
        what, task, rest = m[5], int(m[7]), m[8]
        if what == "launch_slot_":
            tasks[task] = {"slot": int(m[6]), "launch_s": log_seconds(m), "prompt_ms": None}
        elif what == "print_timing" and "prompt eval time" in rest and task in tasks:
            tasks[task]["prompt_ms"] = float(re.search(r"= +([\d.]+) ms", rest)[1])
    return sorted(tasks.values(), key=lambda t: t["launch_s"])


def timeline(run_dir: Path, log: Path, chain_s: float = 0.005) -> list[dict]:
    reqs = sorted((json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line),
                  key=lambda r: r["sent_unix_s"])
    tasks = server_tasks(log)
    if not reqs or not tasks:
        raise SystemExit(f"llamacpp_timeline: no requests in {run_dir} or no tasks in {log}")
    # one server log may hold several runs, a few seconds apart (a load generator starting): split
    # the tasks at such gaps and take the run whose task count is closest to the run's requests
    cuts = [0] + [i for i in range(1, len(tasks)) if tasks[i]["launch_s"] - tasks[i - 1]["launch_s"] > RUN_GAP_S]
    blocks = [tasks[a:b] for a, b in zip(cuts, cuts[1:] + [len(tasks)], strict=True)]
    tasks = min(blocks, key=lambda b: abs(len(b) - len(reqs)))
    offset = tasks[0]["launch_s"] - reqs[0]["sent_unix_s"]  # the first request (a probe) is launched at once
    t0, users, rows = reqs[0]["sent_unix_s"], [], []
    for i, r in enumerate(reqs):
        task = tasks[i] if i < len(tasks) else None
        end = r["sent_unix_s"] + (r["e2e_s"] or 0.0)
        user = next((u for u, last in enumerate(users) if 0 <= r["sent_unix_s"] - last < chain_s), None)
        if user is None:
            users.append(end)
            user = len(users) - 1
        else:
            users[user] = end
        launch = task["launch_s"] - offset if task else None
        shared = task is not None and any(abs(o["launch_s"] - task["launch_s"]) < 0.001 for o in tasks if o is not task)
        rows.append({"stage": r["stage"], "user": user, "sent_s": r["sent_unix_s"] - t0,
                     "wait_ms": (launch - r["sent_unix_s"]) * 1e3 if launch is not None else None,
                     "prompt_ms": task["prompt_ms"] if task else None, "with": shared,
                     "ttft_ms": (r["ttft_s"] or 0.0) * 1e3, "end_s": end - t0})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("server_log", type=Path)
    ap.add_argument("--stage", type=int, help="only the requests sent in this stage's window")
    ap.add_argument("--chain-ms", type=float, default=5.0, help="a request sent this soon after an end continues "
                    "that user (default 5)")
    args = ap.parse_args(argv)
    print("stage user   sent_s  wait_ms prompt_ms with  ttft_ms    end_s")
    for row in timeline(args.run_dir, args.server_log, args.chain_ms / 1e3):
        if args.stage is not None and row["stage"] != args.stage:
            continue
        print(f"{row['stage']!s:>5} {row['user']:>4} {row['sent_s']:8.3f} {row['wait_ms'] or 0:8.1f} "
              f"{row['prompt_ms'] or 0:9.1f} {'yes' if row['with'] else '   ':>4} {row['ttft_ms']:8.1f} {row['end_s']:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
