"""report.html's "GPUs": each stage's GPU telemetry (``--gpu-metrics``, DCGM exporters; the row's
``gpu`` object, ``loadgen.server.gpu_window``) beside its energy cost figures (``loadgen.stats.cost``:
J per output token, kWh per million output tokens). Nothing when no stage has GPU figures. Pure:
rows in, HTML out.
"""

from __future__ import annotations

from loadgen.report.html_page import esc as _e
from loadgen.report.html_page import table_html
from loadgen.stats.metrics import num
from loadgen.stats.stage_load import stage_label

HEAD = ["stage", "GPUs", "power total (W)", "power per GPU (W)", "utilisation (%)", "memory used max (MiB)",
        "energy (J)", "energy from", "J per output tok", "kWh per M output tok"]
SOURCES = {"counter": "energy counter", "power_x_window": "mean power x window"}


def lowest_energy_line(stages: list[dict]) -> str | None:
    """The key finding: the stage with the fewest joules per output token (None without one)."""
    measured = [s for s in stages if s.get("joules_per_output_token") is not None]
    if not measured:
        return None
    best = min(measured, key=lambda s: s["joules_per_output_token"])
    gpu = best.get("gpu") or {}
    return (f"Energy: {num(best['joules_per_output_token'])} J per output token at {stage_label(best)} "
            f"({num(gpu.get('power_w_total'))} W over {gpu.get('gpus')} GPUs; DCGM exporters)")


def gpu_section(stages: list[dict]) -> list[str]:
    """The section's HTML parts: a heading, the table, where the figures come from."""
    rows = [s for s in stages if s.get("gpu")]
    if not rows:
        return []
    cells = []
    for s in rows:
        g = s["gpu"]
        cells.append([stage_label(s), g.get("gpus"), num(g.get("power_w_total")), num(g.get("power_w_mean_per_gpu")),
                      num(g.get("util_pct_mean")), num(g.get("fb_used_mib_max")), num(g.get("energy_j")),
                      SOURCES.get(g.get("energy_source"), "-"), num(s.get("joules_per_output_token")),
                      num(s.get("kwh_per_million_output_tokens"))])
    note = ("From the DCGM exporters given with --gpu-metrics, read at each window's edges and polled during it: "
            "power and utilisation are means over the reads, memory the largest read; the energy is the energy "
            "counter's delta over the window (else mean power x window), per output token over the tokens that "
            "arrived in the window (docs/monitoring.md).")
    return ["<h2>GPUs</h2>", table_html(HEAD, cells, "gpus"), f'<p class="muted">{_e(note)}</p>']
