"""Read the simulator's own counters (its /metrics) for the benchmarks."""

from __future__ import annotations

import urllib.request


def sim_counters(url: str) -> dict[str, float]:
    """{"steps", "overruns", "generation_tokens"} from the simulator's /metrics (0 when absent)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {"steps": 0.0, "overruns": 0.0, "generation_tokens": 0.0}
    names = {"llmsim_steps_total": "steps", "llmsim_step_overruns_total": "overruns"}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = names.get(name) or ("generation_tokens" if name.endswith(":generation_tokens_total") else None)
        if key:
            out[key] += float(line.rsplit(" ", 1)[1])
    return out
