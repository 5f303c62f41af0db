"""The exporter's soak gauges (docs/soak.md): the latest closed time slice's figures and each sliced
stage's drift state, from rows in summary.json form. Pure: rows in, metric families out.

- ``llm_loadgen_slice_<figure>`` {stage}: the latest closed slice's figure (absent before one closes,
  and a figure the slice has not, e.g. a p99 of no request, is absent too);
- ``llm_loadgen_stage_drift`` {stage}: 1 when the stage's figures moved beyond a drift threshold, 0
  when steady (absent without a verdict);
- ``llm_loadgen_stage_drift_slope_per_hour`` {stage, series}: Sen's slope of each tested series, in
  its unit per hour (tok/s, seconds, ratio, preemptions per minute).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily

PREFIX = "llm_loadgen_"  # as exporter.PREFIX (that module imports this one)
# (slice row key, name after the prefix, HELP)
SLICE_FIGURES = (
    ("output_tokens_per_s", "slice_output_tokens_per_second",
     "Output tokens arrived in the latest closed time slice / its seconds."),
    ("ttft_p99_s", "slice_ttft_p99_seconds", "TTFT p99 of the requests completed in the latest closed slice."),
    ("itl_p99_s", "slice_itl_p99_seconds", "Per-token ITL p99 of the requests completed in the latest closed slice."),
    ("e2e_p99_s", "slice_e2e_p99_seconds", "E2E p99 of the requests completed in the latest closed slice."),
    ("error_rate", "slice_error_ratio", "Failed / completed requests in the latest closed slice, 0-1."),
    ("requests", "slice_requests", "Ok requests completed in the latest closed slice."),
    ("server_kv_usage_mean", "slice_server_kv_usage_ratio", "The server's mean KV use over the latest closed slice, 0-1."),
    ("start_s", "slice_start_seconds", "Start of the latest closed slice, seconds after its stage's window opened."),
)


def slice_families(latest: dict | None, stages: Sequence[dict], label_names: tuple[str, ...],
                   labels: list[str]) -> Iterator[GaugeMetricFamily]:
    """Families of the latest slice (``latest``: a slices.csv row, or None) and the stages' drift."""
    names = (*label_names, "stage")
    if latest is not None:
        for key, name, help_text in SLICE_FIGURES:
            if latest.get(key) is not None:
                fam = GaugeMetricFamily(f"{PREFIX}{name}", help_text, labels=names)
                fam.add_metric([*labels, str(latest["stage"])], float(latest[key]))
                yield fam
    judged = [s for s in stages if (s.get("drift") or {}).get("drift") is not None]
    if not judged:
        return
    state = GaugeMetricFamily(f"{PREFIX}stage_drift", "1 when the stage's figures moved beyond a drift "
                              "threshold per hour over its time slices, 0 when steady.", labels=names)
    slope = GaugeMetricFamily(f"{PREFIX}stage_drift_slope_per_hour", "Sen's slope of each drift series "
                              "over the stage's time slices, in its unit per hour.", labels=(*names, "series"))
    for s in judged:
        stage = str(s.get("index"))
        state.add_metric([*labels, stage], 1.0 if s["drift"]["drift"] else 0.0)
        for series, entry in s["drift"]["series"].items():
            slope.add_metric([*labels, stage, series], float(entry["slope_per_h"]))
    yield state
    yield slope
