"""``llm-loadgen --repeat N``: the sweep N times with fresh seeds, and their summary with intervals.

Each repetition is a whole run of its own: a child ``python -m loadgen.cli`` with the user's
options, writing a run folder into the repeat folder, so a repetition is exactly what the same
command without ``--repeat`` does (the KV guard, the SLO search, every file), and nothing of one
repetition's Locust process (its runners, users, gevent hub, exit) reaches the next. After each
repetition the repeat folder's ``repeat.json`` (``loadgen.repeat.summary``) and
``repeat.txt`` are rewritten, so an interrupted series keeps what it finished:

    <results-dir>/<UTC start>_repeat<N>/
        <UTC start>_<run name>/ x N     each repetition's run folder (summary.json, report.html ...)
        latest -> the newest repetition
        repeat.json, repeat.txt         per stage mean and 95 % interval per metric, each finding's interval
        report.html, intervals.png      the same as a page, each stage's intervals plotted

Seeds: repetition k (0-based) gets ``--seed S+k`` (prompts, lengths, dataset order and, unless
--arrival-seed is given, arrivals) and, when given, ``--arrival-seed A+k``; S is the user's
--seed, else 0 (a prompt.seed in a scenario file is not read: pass --seed to choose the base).
Repetition 0 is thus the run without --repeat.

Refused: ``--master`` (external workers would have to reconnect to each repetition; run the
repetitions one by one with --seed S+k), and ``locust -f locustfile.py --repeat`` (a Locust process
is one run; loadgen.locust_face.plugin says so). ``--processes N`` works: each repetition forks its own.

Ctrl-C reaches the running repetition (same process group): it writes its results and exits 130,
and no further repetition starts. SIGTERM to this process is passed on to the repetition the same way.
The exit code is the largest of the repetitions' codes (130 > 5 > 4 > 3 > 2 > 1 > 0).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from loadgen.errors import EXIT_INTERRUPTED, ConfigError
from loadgen.repeat.report_files import write_repeat_report
from loadgen.repeat.summary import REPEAT_FILE, format_repeat_table, repeat_summary
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.run_folder.folders import folder_name, run_folders
from loadgen.run_folder.summary_file import load_summary

DEFAULT_RESULTS_DIR = "results"  # the scenario's results_dir default (config/default.yaml)
_VALUED = ("--results-dir", "--seed", "--arrival-seed", "--repeat")


def _take(args: list[str], flag: str) -> tuple[str | None, list[str]]:
    """(the last value of ``flag`` in ``args``, args without it): ``--flag V`` and ``--flag=V``."""
    value, rest, i = None, [], 0
    while i < len(args):
        a = args[i]
        if a == flag:
            if i + 1 >= len(args):
                raise ConfigError(flag, None, "needs a value", f"e.g. {flag} 3")
            value, i = args[i + 1], i + 2
            continue
        if a.startswith(flag + "="):
            value = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return value, rest


def split_repeat(args: list[str]) -> tuple[int | None, list[str]]:
    """(N of ``--repeat N``, or None; the other arguments). Raises ConfigError on a bad N or an
    option --repeat cannot go with."""
    raw, rest = _take(args, "--repeat")
    if raw is None:
        return None, args
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError("--repeat", raw, "must be a whole number >= 1", "e.g. --repeat 5 (3 to 10 is usual)")
    if any(a == "--master" or a.startswith("--master=") for a in rest):
        raise ConfigError("--repeat", n, "cannot drive external workers: each repetition is a Locust run of "
                          "its own, which workers would have to join again", "run the repetitions one by one "
                          "with --seed 0, 1, 2 ... (or use --processes N on one machine)")
    return n, rest


def seeds(args: list[str], k: int) -> tuple[int, int | None]:
    """(prompt seed, arrival seed or None) of repetition ``k`` (module docstring)."""
    base, arrival = _take(args, "--seed")[0], _take(args, "--arrival-seed")[0]
    try:
        s = int(base) if base is not None else 0
        a = int(arrival) if arrival is not None else None
    except ValueError:
        raise ConfigError("--seed", base if arrival is None else arrival, "must be a whole number with --repeat "
                          "(each repetition adds its index)", "e.g. --seed 0") from None
    return s + k, None if a is None else a + k


def repetition_args(args: list[str], k: int, repeat_dir: Path) -> list[str]:
    """The child's arguments: the user's, with --results-dir the repeat folder and the seeds of
    repetition ``k``."""
    prompt_seed, arrival_seed = seeds(args, k)
    rest = args
    for flag in _VALUED:
        rest = _take(rest, flag)[1]
    return [*rest, "--results-dir", str(repeat_dir), "--seed", str(prompt_seed),
            *(["--arrival-seed", str(arrival_seed)] if arrival_seed is not None else [])]


def make_repeat_dir(args: list[str], n: int, started_wall: float) -> Path:
    """``<results-dir>/<UTC start>_repeat<N>`` (``-2``, ``-3`` ... when taken)."""
    root = Path(_take(args, "--results-dir")[0] or DEFAULT_RESULTS_DIR)
    root.mkdir(parents=True, exist_ok=True)
    base = folder_name(started_wall, f"repeat{n}")
    for i in range(1, 1000):
        path = root / (base if i == 1 else f"{base}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{root / base}: 999 repeat folders started in the same second")


def write_repeat(repeat_dir: Path, done: list[tuple[Path, dict]]) -> dict:
    """repeat.json, repeat.txt, intervals.png and report.html (``loadgen.repeat.report_files``)
    from the repetitions done so far ([(run folder, facts)])."""
    summaries = [load_summary(folder) for folder, _ in done]
    repeat = repeat_summary(summaries, [{"folder": folder.name, **facts} for folder, facts in done])
    atomic_write_text(repeat_dir / REPEAT_FILE, json.dumps(repeat, indent=2) + "\n")
    atomic_write_text(repeat_dir / "repeat.txt", format_repeat_table(repeat) + "\n")
    write_repeat_report(repeat_dir, repeat)
    return repeat


def _run_child(argv: list[str]) -> int:
    """One repetition; SIGTERM to us is passed on; a Ctrl-C (which the child got too) waits for it."""
    child = subprocess.Popen(argv)
    previous = signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue  # the child has its own Ctrl-C: it writes its results, then exits 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_repeats(args: list[str], n: int) -> int:
    """The N repetitions (module docstring); returns the exit code."""
    repeat_dir = make_repeat_dir(args, n, time.time())
    done: list[tuple[Path, dict]] = []
    codes: list[int] = []
    for k in range(n):
        prompt_seed, arrival_seed = seeds(args, k)
        print(f"llm-loadgen: repetition {k + 1} of {n} (seed {prompt_seed}"
              f"{'' if arrival_seed is None else f', arrival seed {arrival_seed}'}) -> {repeat_dir}", flush=True)
        before = set(run_folders(repeat_dir))
        code = _run_child([sys.executable, "-m", "loadgen.cli", *repetition_args(args, k, repeat_dir)])
        codes.append(code)
        new = sorted(set(run_folders(repeat_dir)) - before)
        if new:
            done.append((new[-1], {"prompt_seed": prompt_seed, "arrival_seed": arrival_seed, "exit_code": code}))
            write_repeat(repeat_dir, done)
        if code == EXIT_INTERRUPTED or not new:
            print(f"llm-loadgen: repetition {k + 1} ended with exit code {code}"
                  f"{'' if new else ' and no results'}; no further repetition", file=sys.stderr, flush=True)
            break
    if done:
        repeat = write_repeat(repeat_dir, done)
        print(f"\nllm-loadgen: {len(done)} of {n} repetitions\n{format_repeat_table(repeat)}", flush=True)
        print(f"llm-loadgen: repeat results in {repeat_dir}/ (repeat.json, repeat.txt, report.html, one run folder per "
              "repetition)", flush=True)
    return max(codes)
