"""``llm-loadgen demo`` (``make demo``): the default sweep against a simulated large server, in about
three minutes, with nothing but the package installed.

First it measures the machine (``machine_check``): how much of a core this process gets while it
spins for half a second, and the load average per core. A demo on a busy machine would print
figures it then disowns (stages flagged ``client_bound``), so there it says so and runs the
simulator at half the speed (``BUSY_TIME_SCALE``): half the chunks a second to read.

Then it starts the simulator with the Qwen3.5-397B / 8-GPU preset (1,570,000 KV tokens, SGLang flavor)
sped up by a time scale, runs the sweep (``llm-loadgen --scenario demo``, the packaged locustfile)
(1000 input + 1000 output tokens, C = 1, 4, 16, ... 1024) and short stage windows, prints
the per-stage table, and stops the simulator. The guard stopping before C=1024 is the expected
outcome here, so its exit code (3) counts as success.

It also asks the capacity planner's question: how many users while TTFT <= 2 s and TPOT <= 30 ms
(33 tokens/s per user) for 99 % of requests? The objectives are stated in the server's own time
and divided by the time scale for the client (which measures wall time); after the sweep a short
bisection refines the bracket (resolution 50 %: one search stage keeps the demo short; ARGS="--set
slo.resolution=0.1" refines further). It ends with the knee, the SLO maximum and the KV ceiling
side by side. The run's summary.json and report.html get a note that their figures are in the
sped-up simulator's wall-clock time (``notes``).

On a small machine the top stages can be flagged ``client_bound``: the simulator's 10x speed-up
streams a real server's C=512 in a tenth of the time, so one load process reads hundreds of
streams' chunks at once every few tens of milliseconds and each request turnover sends C requests
at once; its own delay (event-loop lag) then passes the 20 ms check, and in the server's time it
counts ten times. Halving the time scale does not remove it (the bursts are as large), and more
load processes on two cores compete with the simulator. So the demo says it where it matters: the
server-time table marks those stages and one line says what the client, not the server, limited
(``client_bound_line``), also as a note in summary.json and report.html.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import EXIT_GUARD_ABORT
from loadgen.report.files import write_results
from loadgen.run_folder.folders import resolve_run_dir
from loadgen.sim.launch import running_sim

QUIET_TIME_SCALE, BUSY_TIME_SCALE = 10.0, 5.0
RESULTS = "results/demo"  # under the current directory, as every run's results/ (DEMO_RESULTS overrides)
BUSY_CPU_SHARE = 0.85  # a spinning process that gets less of a core than this shares it with others
BUSY_LOAD_PER_CORE = 0.7  # 1-minute load average per core (the demo itself needs about two cores)
SLO_TTFT_S, SLO_TPOT_S = 2.0, 0.030  # in the simulated server's time
SLO_RESOLUTION = 0.5


def slo_args(scale: float) -> list[str]:
    """The demo's objectives in wall-clock seconds (what the client measures); a later --set in
    ARGS wins over the resolution."""
    return ["--slo", f"ttft_s={SLO_TTFT_S / scale:g},tpot_s={SLO_TPOT_S / scale:g}", "--slo-search",
            "--set", f"slo.resolution={SLO_RESOLUTION}"]


def time_scale_note(scale: float) -> str:
    return (f"The simulated server ran {scale:g}x faster than real time: every figure here is in wall-clock "
            f"time (tok/s {scale:g}x higher, TTFT/ITL {scale:g}x lower than the server's own time; the "
            "console shows both).")


def client_bound_line(stages: list[dict], scale: float) -> str | None:
    """One line on the stages flagged client_bound (None if none): the load generator, not the
    server, limited them; which figures that touches; the cause; where to read more."""
    bound = [s for s in stages if "client_bound" in (s.get("flags") or [])]
    if not bound:
        return None
    lags = ", ".join(f"{(s.get('client') or {}).get('loop_lag_p99_s', 0) * 1000:.0f}" for s in bound)
    return (f"C={', C='.join(str(s['concurrency']) for s in bound)} client-bound: the load generator, not "
            f"the server, limited them (tokens read up to {lags} ms late, {scale:g}x that in server time): "
            f"their TTFT/ITL p99 are partly the client's, their tok/s is not; cause: the {scale:g}x simulator "
            "on a small machine (docs/benchmarks.md 'How many workers')")


def note_time_scale(run_dir: Path, scale: float) -> None:
    """Add the time-scale note (and the client-bound one) to the run's summary.json and rebuild
    its report with them."""
    summary = json.loads((run_dir / "summary.json").read_text())
    bound = client_bound_line(summary["stages"], scale)
    summary["notes"] = [*summary.get("notes", []), time_scale_note(scale), *([bound] if bound else [])]
    write_results(run_dir, summary)


def print_simulated_time(summary_path: Path, scale: float) -> None:
    """The table above is in wall-clock time; the simulated server runs `scale` times faster."""
    if not summary_path.exists():
        return
    summary = json.loads(summary_path.read_text())
    print(f"\ndemo: the simulator runs {scale:g}x faster than real time; in the server's own time:")
    print("     C   out tok/s   TTFT p99   TPOT p50   SLO met   goodput tok/s")
    for s in summary["stages"]:
        ttft, tpot, slo = s.get("ttft_p99_s"), s.get("tpot_p50_s"), s.get("slo") or {}
        good = s.get("goodput_output_tokens_per_s")
        att = slo.get("attainment")
        print(f"  {s['concurrency']:>4}  {s['output_tokens_per_s'] / scale:>10,.0f}"
              f"  {'-' if ttft is None else f'{ttft * scale * 1000:>7.0f} ms'}"
              f"  {'-' if tpot is None else f'{tpot * scale * 1000:>6.1f} ms'}"
              f"  {'-' if att is None else f'{att:>7.0%}'}"
              f"  {'-' if good is None else f'{good / scale:>12,.0f}'}"
              f"{'   (search)' if s.get('search') else ''}"
              f"{'   (client-bound)' if 'client_bound' in (s.get('flags') or []) else ''}")
    knee, guard, answer = summary["knee"]["concurrency"], summary["guard"], summary.get("slo") or {}
    best, hi = answer.get("max_concurrency"), answer.get("bracket", (None, None))[1]
    print(f"demo: objectives TTFT <= {SLO_TTFT_S:g} s, TPOT <= {SLO_TPOT_S * 1000:g} ms for "
          f"{answer.get('attainment_target', 0.99):.0%} of requests (server time)")
    print(f"demo:   knee           C={knee}" if knee else "demo:   knee           none (throughput still rising)")
    print(f"demo:   SLO maximum    C={best}" + (f" (C={hi} failed)" if hi else "") if best
          else f"demo:   SLO maximum    none (C={hi} already failed)")
    ceiling, stop = guard.get("max_concurrency"), guard.get("stopped_before")
    print(f"demo:   KV ceiling     C={ceiling} ({guard['capacity_tokens']:,} tokens"
          + (f"; the guard stopped before C={stop})" if stop else ")") if ceiling else "demo:   KV ceiling     unknown")
    if bound := client_bound_line(summary["stages"], scale):
        print(f"demo: {bound}")


@dataclass(frozen=True)
class Machine:
    cpu_share: float  # of one core, that a spinning process got over ``spin_s`` (1.0: all of it)
    load_per_core: float  # the 1-minute load average / cores
    cores: int

    @property
    def busy(self) -> bool:
        return self.cpu_share < BUSY_CPU_SHARE or self.load_per_core > BUSY_LOAD_PER_CORE

    def line(self) -> str:
        state = "busy" if self.busy else "quiet"
        return (f"this machine is {state}: {self.cores} cores, load {self.load_per_core:.2f} per core, a spinning "
                f"process got {self.cpu_share:.0%} of a core")


def machine_check(spin_s: float = 0.5) -> Machine:
    """Spin for ``spin_s`` of wall time and count the CPU time we got; read the load average."""
    cores = os.cpu_count() or 1
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < spin_s:
        pass
    share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    return Machine(min(share, 1.0), os.getloadavg()[0] / cores, cores)


def time_scale_for(machine: Machine, asked: str | None) -> tuple[float, str | None]:
    """The simulator's speed-up: DEMO_TIME_SCALE when set, else 10, or 5 on a busy machine (with the
    line that says why)."""
    if asked:
        return float(asked), None
    if not machine.busy:
        return QUIET_TIME_SCALE, None
    return BUSY_TIME_SCALE, (f"the simulator runs {BUSY_TIME_SCALE:g}x instead of {QUIET_TIME_SCALE:g}x (half "
                             "the chunks a second for this client to read); stages this client could not keep "
                             "up with are still marked client-bound. For the full-speed demo, run it on a "
                             "quiet machine")


def main(argv: list[str] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    machine = machine_check()
    scale, why = time_scale_for(machine, os.environ.get("DEMO_TIME_SCALE"))
    print(f"demo: {machine.line()}" + (f"; {why}" if why else ""), flush=True)
    results = os.environ.get("DEMO_RESULTS", RESULTS)
    with running_sim("--preset", "qwen35-397b-8gpu", "--time-scale", f"{scale:g}") as sim:
        print(f"demo: simulator (Qwen3.5-397B, 8 GPUs, time x{scale:g}) at {sim.url}", flush=True)
        cmd = [sys.executable, "-m", "loadgen.cli", "--host", sim.url, "--scenario", "demo",
               "--results-dir", results, "--loglevel", "WARNING", *slo_args(scale), *extra]
        code = subprocess.call(cmd)
    run_dir = resolve_run_dir(results)
    if (run_dir / "summary.json").is_file():
        note_time_scale(run_dir, scale)
    print_simulated_time(run_dir / "summary.json", scale)
    if code == EXIT_GUARD_ABORT:
        print("demo: the KV guard stopped the sweep before a stage that does not fit (expected).")
        code = 0
    print(f"demo: results in {run_dir}/ (summary.json, stages.csv, report.html); {results}/latest is the newest")
    return code


if __name__ == "__main__":
    sys.exit(main())
