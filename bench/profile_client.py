"""Where the client's CPU goes: py-spy samples of the real locust process.

Sources: ``flood`` = nginx (bench/flood.py), whole 1000-token streams per read (the ingest case);
``sim`` = the simulator at 1024 streams, ``--tokens-per-chunk`` (default 4) tokens per chunk every
``tokens x 20 ms``, one chunk per read (the fidelity case). Starts the source and one locust process
(one stage, default settings), records ``--seconds`` of py-spy samples inside the measurement
window, and prints the functions with the largest share of samples, by self time and by inclusive
time (file:function, percent of samples), and the self time summed per source file (e.g. the share
of ``gevent/timeout.py``: the per-read socket timeout). Beside the samples, from /proc over the
same window: the client's CPU (% of one core) and, for ``sim``, chunks/s (the stage's tokens/s /
tokens per chunk) and chunks per client CPU-second = chunks/s / (CPU % / 100): the figure to
compare before/after a change (sample counts depend on how idle the process was).
Needs ``py-spy`` (``.venv/bin/pip install py-spy``) and ptrace rights (root, or
kernel.yama.ptrace_scope=0).

    .venv/bin/python bench/profile_client.py [--source flood|sim] [--seconds 10] [--concurrency 16]
                                             [--tokens-per-chunk 4]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flood import running_flood  # noqa: E402
from locustproc import BenchLocust  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loadgen.sim.launch import running_sim  # noqa: E402

SIM = ("--preset", "fixed", "--ttft-ms", "200", "--itl-ms", "20", "--kv-tokens", "100000000",
       "--max-running", "100000")


@contextlib.contextmanager
def source(name: str, tokens_per_chunk: int):
    """Yield (url, extra locust args) for the named token source."""
    if name == "flood":
        with running_flood(1000, 1000) as url:
            yield url, ("--kv-capacity-tokens", "1000000000")
    else:
        with running_sim(*SIM, "--tokens-per-chunk", str(tokens_per_chunk)) as sim:
            yield sim.url, ("--input-tokens", "256", "--output-tokens", "200")


def parse_collapsed(text: str) -> tuple[collections.Counter, collections.Counter, int]:
    """py-spy raw output: one "frame;frame;... count" line per stack (root first).

    self[f] = samples whose innermost frame is f; inclusive[f] = samples with f anywhere in the
    stack (counted once per sample even when f recurses).
    """
    self_c, incl_c, total = collections.Counter(), collections.Counter(), 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";")]
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            incl_c[f] += n
    return self_c, incl_c, total


def by_file(self_c: collections.Counter) -> collections.Counter:
    """Self samples summed per source file ('file.py:func' -> 'file.py')."""
    out = collections.Counter()
    for name, n in self_c.items():
        out[name.rsplit(":", 1)[0]] += n
    return out


def _short(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'file.py:func' with the package kept for site-packages."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    if "site-packages" in parts:
        path = "/".join(parts[parts.index("site-packages") + 1:])
    elif "loadgen" in parts:
        path = "/".join(parts[parts.index("loadgen"):])
    else:
        path = Path(path).name
    return f"{path}:{name}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--source", choices=("flood", "sim"), default="flood")
    ap.add_argument("--concurrency", type=int, default=None, help="default: 16 (flood), 1024 (sim)")
    ap.add_argument("--tokens-per-chunk", type=int, default=4, help="sim source only")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--locustfile", default="locustfile.py")
    args = ap.parse_args(argv)
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        print("profile: SKIPPED, py-spy not installed (.venv/bin/pip install py-spy)")
        return 0
    concurrency = args.concurrency or (16 if args.source == "flood" else 1024)
    tpc = args.tokens_per_chunk
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp, source(args.source, tpc) as (url, extra):
        ramp_s, warmup_s = (1, 3) if args.source == "flood" else (5, 8)
        run = BenchLocust(url, Path(tmp), "--stages", str(concurrency), "--ramp", str(ramp_s),
                          "--warmup", str(warmup_s), "--stage-duration", str(args.seconds + 4), *extra,
                          locustfile=args.locustfile)
        try:
            t_ramp = run.wait_for(r"stage 0 C=\d+: ramp", 60)
            time.sleep(max(0.0, t_ramp + ramp_s + warmup_s + 1 - time.perf_counter()))
            out = Path(tmp) / "profile.txt"
            before = run.sample()
            subprocess.run([pyspy, "record", "-p", str(run.pid), "-d", str(args.seconds), "-r", "200",
                            "-f", "raw", "-o", str(out), "--nonblocking"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            after = run.sample()
            run.wait(120)
        except BaseException:
            run.kill()
            raise
        self_c, incl_c, total = parse_collapsed(out.read_text())
        (stage,) = run.summary["stages"]
    cpu_pct = 100 * (after["cpu_s"] - before["cpu_s"]) / (after["t"] - before["t"])
    print(f"{total} samples over {args.seconds} s of the measurement window ({args.source}, C={concurrency})")
    line = f"client CPU {cpu_pct:.0f}% of a core over the samples"
    if args.source == "sim":
        chunks_per_s = (stage["output_tokens_per_s"] or 0) / tpc
        line += (f"; {chunks_per_s:,.0f} chunks/s ({tpc} tokens/chunk) = "
                 f"{chunks_per_s / max(cpu_pct / 100, 1e-9):,.0f} chunks per client CPU-second")
    print(line)
    for title, counter in (("self time", self_c), ("inclusive time", incl_c), ("self time by file", by_file(self_c))):
        print(f"\n{title}: share of samples")
        for name, n in counter.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
