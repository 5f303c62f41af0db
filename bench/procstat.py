"""CPU seconds and memory of a process tree, read from /proc (Linux). No dependencies.

- CPU seconds of a process = (utime + stime) / CLK_TCK from /proc/<pid>/stat (fields 14, 15).
- A tree's CPU seconds = the sum over the process and its live descendants (``locust --processes
  N`` forks N workers from the master; all of them are the client).
- RSS / peak RSS = VmRSS / VmHWM from /proc/<pid>/status, in MB (10^6 bytes).
"""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, seconds (0 if it is gone)."""
    try:
        f = _stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(f[11]) + int(f[12])) / TICK


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid`` (children, grandchildren...), by scanning /proc for parents."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent_of[int(entry)] = int(_stat_fields(int(entry))[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent_of.items() if pp == p]
        out.extend(kids)
        frontier.extend(kids)
    return out


def tree(pid: int) -> list[int]:
    return [pid, *descendants(pid)]


def tree_cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds of each pid (a pid that exited reads 0; sample trees while they run)."""
    return {p: cpu_seconds(p) for p in pids}


def memory_mb(pid: int) -> dict[str, float]:
    """{"rss": VmRSS, "hwm": VmHWM} in MB; empty if the process is gone."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out["rss" if key == "VmRSS" else "hwm"] = int(value.split()[0]) * 1024 / 1e6
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return out
