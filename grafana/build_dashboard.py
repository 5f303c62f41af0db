"""Generate grafana/dashboards/llm-loadgen.json (run: python grafana/build_dashboard.py).

The JSON is committed; tests/unit/export/test_dashboard_json.py checks it equals this script's output, and
tests/integration/test_dashboard_prometheus.py runs every query in it against a real Prometheus.

Variables: $datasource (Prometheus), $loadgen_job (job scraping llm-loadgen's exporter), $model,
$server_job (job scraping the vLLM/SGLang server).
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "llm-loadgen.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
L = '{job=~"$loadgen_job", model=~"$model"}'  # our series
S = '{job=~"$server_job"}'  # the server's series
RI = "[$__rate_interval]"


def rate(metric: str, sel: str = L) -> str:
    return f"sum(rate({metric}{sel}{RI}))"


def quantile(q: float, metric: str, sel: str = L) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{sel}{RI})))"


def quantiles(metric: str, sel: str = L, qs=(0.5, 0.9, 0.99), prefix: str = "") -> list:
    return [(quantile(q, metric, sel), f"{prefix}p{round(q * 100)}") for q in qs]


FINISHED = f"llm_loadgen_stage_finished{L}"  # one series per finished stage, its value the index


def latest_stage(series: str) -> str:
    """``series`` (a selector of a per-stage family, loadgen.export.stage_gauges) kept to the latest
    finished stage of each exporter: the stage whose ``stage_finished`` value (its index) is largest."""
    return (f"{series} and on (job, instance, stage) "
            f"({FINISHED} == on (job, instance) group_left max by (job, instance) ({FINISHED}))")


class Layout:
    """Places panels left to right on Grafana's 24-column grid and numbers them."""

    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.x = self.y = self.row_h = 0
        self.next_id = 1

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        self.y += self.row_h
        self.x = self.row_h = 0
        self.panels.append({"id": self._id(), "type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def panel(self, kind: str, title: str, desc: str, targets: list, unit: str = "short",
              w: int = 8, h: int = 8, instant: bool = False, **extra) -> None:
        if self.x + w > 24:
            self.y += self.row_h
            self.x = self.row_h = 0
        refs = "ABCDEFGHIJKLMNOP"
        panel = {
            "id": self._id(), "type": kind, "title": title, "description": desc, "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit, "custom": {}}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "none"}},
            "targets": [{"refId": refs[i], "datasource": DS, "expr": expr, "legendFormat": legend,
                         "range": not instant, "instant": instant, **({"format": "table"} if instant else {})}
                        for i, (expr, legend) in enumerate(targets)],
        }
        if kind == "stat":
            panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                                "colorMode": "value", "graphMode": "area", "textMode": "auto"}
        panel.update(extra)
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def loadgen_rows(lay: Layout) -> None:
    lay.row("Load generator: now")
    lay.panel("stat", "Output tokens/s (live)",
              "Completion tokens per second as their chunks arrive (all requests).",
              [(rate("llm_loadgen_received_output_tokens_total"), "")], w=4, h=4)
    lay.panel("stat", "TTFT p99", "Client-side time to first token, 99th percentile.",
              [(quantile(0.99, "llm_loadgen_ttft_seconds"), "")], "s", w=4, h=4)
    lay.panel("stat", "ITL p99 (per token)", "Per-token inter-token latency, 99th percentile.",
              [(quantile(0.99, "llm_loadgen_itl_seconds"), "")], "s", w=4, h=4)
    lay.panel("stat", "Failed requests/s", "Errors and overload answers per second.",
              [(f'sum(rate(llm_loadgen_requests_total{{job=~"$loadgen_job", model=~"$model", '
                f'outcome!="ok"}}{RI}))', "")], "reqps", w=4, h=4)
    lay.panel("stat", "In-flight", "Requests sent and not finished.",
              [(f"sum(llm_loadgen_inflight_requests{L})", "")], w=4, h=4)
    lay.panel("stat", "Stage", "Current stage index (0-based).",
              [(f"max(llm_loadgen_stage{L})", "")], w=4, h=4)

    lay.row("Load generator: throughput and latency")
    lay.panel("timeseries", "Tokens/s",
              "Output: completion tokens of successful requests, counted when they finish; live: "
              "completion tokens of all requests as their chunks arrive (smooth for long requests); "
              "failed: tokens received by requests that then failed; input: prompt tokens.",
              [(rate("llm_loadgen_output_tokens_total"), "output"),
               (rate("llm_loadgen_received_output_tokens_total"), "output (live)"),
               (rate("llm_loadgen_failed_output_tokens_total"), "output (failed requests)"),
               (rate("llm_loadgen_input_tokens_total"), "input")])
    lay.panel("timeseries", "Goodput vs throughput",
              "With SLO objectives (slo: block): output tokens/s of requests meeting every objective "
              "(TTFT, TPOT, E2E, worst gap), beside the output tokens/s of all successful requests.",
              [(rate("llm_loadgen_slo_met_output_tokens_total"), "goodput (met the SLO)"),
               (rate("llm_loadgen_output_tokens_total"), "output (all ok requests)")])
    lay.panel("timeseries", "SLO attainment",
              "Share of requests meeting every objective (failed requests count against it): the "
              "current stage so far, over the rate interval, and the stage's pass mark (slo.attainment).",
              [(f"max(llm_loadgen_slo_attainment_ratio{L})", "current stage"),
               (f"{rate('llm_loadgen_slo_met_requests_total')} / {rate('llm_loadgen_requests_total')}",
                "rate interval"),
               (f"max(llm_loadgen_slo_attainment_target_ratio{L})", "target")], "percentunit")
    lay.panel("timeseries", "TTFT", "Time to first token = t(first content chunk) - t(sent).",
              quantiles("llm_loadgen_ttft_seconds"), "s")
    lay.panel("timeseries", "ITL",
              "Per-token ITL (gap / tokens in chunk, one sample per token) and per-chunk gap p50.",
              quantiles("llm_loadgen_itl_seconds")
              + [(quantile(0.5, "llm_loadgen_itl_chunk_seconds"), "per-chunk p50")], "s")
    lay.panel("timeseries", "TPOT", "(E2E - TTFT) / (N - 1) per request.",
              quantiles("llm_loadgen_tpot_seconds", qs=(0.5, 0.9)), "s")
    lay.panel("timeseries", "E2E latency", "t(last content chunk) - t(sent).",
              quantiles("llm_loadgen_e2e_seconds"), "s")
    lay.panel("timeseries", "Requests/s by outcome", "Finished requests per second.",
              [(f"sum by (outcome) (rate(llm_loadgen_requests_total{L}{RI}))", "{{outcome}}")],
              "reqps")
    lay.panel("bargauge", "Requests by kind (time range)",
              "Finished requests over the dashboard's time range, by failure kind.",
              [(f"sum by (kind) (increase(llm_loadgen_requests_total{L}[$__range]))", "{{kind}}")],
              w=8, h=8, options={"orientation": "horizontal", "displayMode": "basic",
                                 "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                                   "values": False}})

    lay.row("Load generator: load, KV guard, client health")
    lay.panel("timeseries", "Concurrency",
              "Users running, requests in flight, and the stage's target concurrency.",
              [(f"sum(llm_loadgen_users{L})", "users"),
               (f"sum(llm_loadgen_inflight_requests{L})", "in-flight"),
               (f"max(llm_loadgen_target_concurrency{L})", "target")])
    lay.panel("state-timeline", "Stage and phase", "Stage index and the phase of the run.",
              [(f"max(llm_loadgen_stage{L})", "stage"),
               (f"max by (phase) (llm_loadgen_phase{L}) == 1", "{{phase}}")])
    lay.panel("timeseries", "KV tokens: projected vs capacity",
              "Guard projection concurrency * (input + output tokens) against the server's "
              "KV capacity.",
              [(f"max(llm_loadgen_kv_projected_tokens{L})", "projected"),
               (f"max(llm_loadgen_kv_capacity_tokens{L})", "capacity")])
    lay.panel("timeseries", "Client CPU", "CPU of the load generator; near 100% per process "
              "means client-side timings are unreliable.",
              [(f"max(llm_loadgen_client_cpu_percent{L})", "cpu %")], "percent")
    lay.panel("timeseries", "Client event-loop lag",
              "How late a timer fires in the load generator; this delay is added to TTFT/ITL.",
              [(f"max(llm_loadgen_client_loop_lag_seconds{L})", "loop lag")], "s")
    lay.panel("stat", "KV guard breaches", "Times the guard saw projected KV tokens exceed capacity.",
              [(f"sum(llm_loadgen_guard_breaches_total{L})", "")])

    lay.row("Load generator: open loop (rate stages)")
    lay.panel("timeseries", "Offered vs achieved request rate",
              "Open loop: the stage's offered rate, arrivals that came due (sent + dropped), requests "
              "completed ok, and arrivals dropped because --max-inflight were in flight. Achieved "
              "below offered: the server no longer keeps up.",
              [(f"max(llm_loadgen_offered_rate_requests_per_second{L})", "offered"),
               (rate("llm_loadgen_scheduled_requests_total"), "scheduled"),
               (f'sum(rate(llm_loadgen_requests_total{{job=~"$loadgen_job", model=~"$model", '
                f'outcome="ok"}}{RI}))', "achieved"),
               (rate("llm_loadgen_dropped_by_client_total"), "dropped by client")], "reqps")
    lay.panel("timeseries", "Send lateness (client)",
              "Open loop: t(actual send) - t(scheduled send). TTFT and E2E are timed from the "
              "scheduled send, so this is included in them; p99 >= 5 ms flags the stage client_bound.",
              quantiles("llm_loadgen_schedule_lateness_seconds"), "s")
    lay.panel("timeseries", "In flight vs Little's law",
              "Requests in flight, against offered rate x mean E2E (Little's law L = lambda x W).",
              [(f"sum(llm_loadgen_inflight_requests{L})", "in flight"),
               (f"max(llm_loadgen_offered_rate_requests_per_second{L}) * "
                f"sum(rate(llm_loadgen_e2e_seconds_sum{L}{RI})) / sum(rate(llm_loadgen_e2e_seconds_count{L}{RI}))",
                "offered x E2E mean")])

    lay.row("Load generator: reasoning, speculative decoding, prefix cache")
    ok = f'sum(rate(llm_loadgen_requests_total{{job=~"$loadgen_job", model=~"$model", outcome="ok"}}{RI}))'
    lay.panel("timeseries", "Time to first answer token",
              "A reasoning model thinks first (delta.reasoning_content / delta.reasoning); TTFT is its first "
              "token of any kind, this the first answer token (delta.content). Equal without reasoning.",
              [*quantiles("llm_loadgen_time_to_first_answer_token_seconds", qs=(0.5, 0.99), prefix="answer "),
               (quantile(0.5, "llm_loadgen_ttft_seconds"), "TTFT p50")], "s", w=6)
    lay.panel("timeseries", "Reasoning tokens per request",
              "Reasoning tokens (usage.completion_tokens_details.reasoning_tokens, else counted from the "
              "stream) per ok request.",
              [(f"{rate('llm_loadgen_reasoning_tokens_total')} / {ok}", "reasoning tokens/request")], w=6)
    lay.panel("timeseries", "Tokens per chunk",
              "Completion tokens / content chunks of ok requests: above 1 with speculative decoding "
              "(the accepted tokens of a step come in one chunk) or a stream interval; beside it the server's "
              "own accept length and share of drafts accepted over the last finished stage's window.",
              [(f"{rate('llm_loadgen_output_chunk_tokens_total')} / {rate('llm_loadgen_output_chunks_total')}",
                "tokens/chunk"),
               (f"max({latest_stage(f'llm_loadgen_server_spec_accept_length{L}')})",
                "server accept length (last stage)"),
               (f"max({latest_stage(f'llm_loadgen_server_spec_acceptance_ratio{L}')})",
                "server share of drafts accepted (last stage)")],
              w=6)
    lay.panel("timeseries", "Cached prompt share",
              "usage.prompt_tokens_details.cached_tokens / prompt tokens of the requests that reported it "
              "(vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report; llama.cpp always).",
              [(f"{rate('llm_loadgen_cached_prompt_tokens_total')} / "
                f"{rate('llm_loadgen_cache_reported_prompt_tokens_total')}", "cached share"),
               (f"max({latest_stage(f'llm_loadgen_server_prefix_cache_hit_ratio{L}')})",
                "server hit rate (last stage)")],
              "percentunit", w=6)


# The server rows: the same panels for each engine, with that engine's own metric names.
SERVERS = (
    {"name": "vLLM", "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
     "waiting_label": "waiting", "requests_help": "Running and waiting requests in the scheduler.",
     "usage": "vllm:kv_cache_usage_perc", "usage_title": "vLLM KV cache usage",
     "usage_help": "Fraction of KV cache blocks in use (0-1).", "usage_label": "kv usage",
     "evict": "vllm:num_preemptions_total", "evict_title": "vLLM preemptions/s",
     "evict_help": "Requests preempted (KV cache full).", "evict_label": "preemptions/s",
     "generated": "vllm:generation_tokens_total", "ttft": "vllm:time_to_first_token_seconds",
     "itl": "vllm:inter_token_latency_seconds", "itl_help": "Server-side inter-token latency (per engine step).",
     "client_itl": ("llm_loadgen_itl_chunk_seconds", "client per-chunk p99")},
    {"name": "SGLang", "running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs",
     "waiting_label": "queued", "requests_help": "Running and queued requests.",
     "usage": "sglang:token_usage", "usage_title": "SGLang token usage",
     "usage_help": "Fraction of KV token pool in use (0-1).", "usage_label": "token usage",
     "evict": "sglang:num_retracted_requests_total", "evict_title": "SGLang retractions/s",
     "evict_help": "Decode requests sent back to the queue.", "evict_label": "retracted/s",
     "generated": "sglang:generation_tokens_total", "ttft": "sglang:time_to_first_token_seconds",
     "itl": "sglang:inter_token_latency_seconds", "itl_help": "Server-side ITL (gap / tokens in chunk).",
     "client_itl": ("llm_loadgen_itl_seconds", "client per-token p99")},
)


def server_rows(lay: Layout) -> None:
    for sv in SERVERS:
        name = sv["name"]
        lay.row(f"Server: {name}")
        lay.panel("timeseries", f"{name} requests", sv["requests_help"],
                  [(f"sum({sv['running']}{S})", "running"),
                   (f"sum({sv['waiting']}{S})", sv["waiting_label"])])
        lay.panel("timeseries", sv["usage_title"], sv["usage_help"],
                  [(f"max({sv['usage']}{S})", sv["usage_label"])], "percentunit")
        lay.panel("timeseries", sv["evict_title"], sv["evict_help"],
                  [(rate(sv["evict"], S), sv["evict_label"])])
        lay.panel("timeseries", "Generation tokens/s: server vs client",
                  "Server-counted generation tokens against tokens the load generator received.",
                  [(rate(sv["generated"], S), name),
                   (rate("llm_loadgen_received_output_tokens_total"), "client (live)")])
        lay.panel("timeseries", f"{name} TTFT", "Server-side time to first token.",
                  quantiles(sv["ttft"], S, (0.5, 0.99), "server ")
                  + [(quantile(0.99, "llm_loadgen_ttft_seconds"), "client p99")], "s")
        client_itl, client_label = sv["client_itl"]
        lay.panel("timeseries", f"{name} ITL", sv["itl_help"],
                  quantiles(sv["itl"], S, (0.5, 0.99), "server ")
                  + [(quantile(0.99, client_itl), client_label)], "s")


def clocks_row(lay: Layout) -> None:
    """Client and server clocks side by side (loadgen.export.stage_gauges): per finished stage, and
    live from both sides' histograms."""
    lay.row("Client and server clocks (where the time goes)")
    stage = '{job=~"$loadgen_job", model=~"$model", metric="%s"}'
    server_ttft = '{__name__=~"(vllm|sglang):time_to_first_token_seconds_bucket", job=~"$server_job"}'
    lay.panel("timeseries", "TTFT: client vs server",
              "The client's TTFT and the server's own (its /metrics histogram), p50: live from both sides' "
              "histograms, and the latest finished stage's figures over its exact window (stage_latency_seconds). "
              "The gap is network + client (+ any proxy).",
              [(quantile(0.5, "llm_loadgen_ttft_seconds"), "client p50 (live)"),
               (f"histogram_quantile(0.5, sum by (le) (rate({server_ttft}{RI})))", "server p50 (live)"),
               (f'max by (clock, stat) ({latest_stage("llm_loadgen_stage_latency_seconds" + stage % "ttft")})',
                "{{clock}} {{stat}} (stage)")], "s", w=12)
    stacked = {"fieldConfig": {"defaults": {"unit": "s", "custom": {"stacking": {"mode": "normal"},
                                                                      "drawStyle": "bars", "fillOpacity": 80}},
                               "overrides": []}}
    for metric, name in (("ttft", "TTFT"), ("e2e", "E2E")):
        lay.panel("timeseries", f"Where the {name} goes (latest finished stage)",
                  f"The client's mean {name} split into server queue, prefill, decode, the server's rest and "
                  "network + client; they add up to the client's mean (stage_breakdown_seconds).",
                  [(f'max by (part) ({latest_stage("llm_loadgen_stage_breakdown_seconds" + stage % metric)})',
                    "{{part}}")],
                  "s", w=6, **stacked)


# The cost figures of every finished stage (loadgen.export.stage_gauges; a run with cost.gpus):
# (metric, column title, unit)
COST_COLUMNS = (
    ("llm_loadgen_stage_output_tokens_per_gpu_per_second", "output tok/s per GPU", "short"),
    ("llm_loadgen_stage_total_tokens_per_gpu_per_second", "total tok/s per GPU", "short"),
    ("llm_loadgen_stage_usd_per_million_output_tokens", "$ per M output tok", "currencyUSD"),
    ("llm_loadgen_stage_usd_per_million_total_tokens", "$ per M total tok", "currencyUSD"),
    # with --gpu-metrics (DCGM exporters): the GPUs over the window
    ("llm_loadgen_stage_joules_per_output_token", "J per output tok", "joule"),
    ("llm_loadgen_stage_gpu_energy_joules", "GPU energy", "joule"),
    ("llm_loadgen_stage_gpu_power_watts", "GPU power", "watt"),
    ("llm_loadgen_stage_gpu_utilization_ratio", "GPU util", "percentunit"),
    ("llm_loadgen_stage_gpu_memory_used_max_bytes", "GPU memory max", "bytes"),
    ("llm_loadgen_stage_gpus", "GPUs", "short"),
)


def stages_row(lay: Layout) -> None:
    """A table of the finished stages, one line each, from the per-stage series: the cost figures."""
    lay.row("Finished stages: cost and efficiency")
    by = "max by (instance, stage, concurrency, rate)"
    refs = "ABCDEFGHIJKLMNOP"
    lay.panel("table", "Cost and efficiency by stage",
              "Each finished stage of a run with cost.gpus (--gpus, --gpu-hour-usd): output and total tokens/s "
              "per GPU, and what a million tokens cost at the stage's rate (gpu_hour_usd x gpus / tokens per "
              "hour x 1e6); with --gpu-metrics (DCGM exporters, one per node) the GPUs' energy per output token, "
              "energy, mean power (summed over GPUs), utilisation and peak memory over the window. One line per "
              "stage: concurrency, or the offered rate of an open-loop stage.",
              [(f"{by} ({metric}{L})", title) for metric, title, _ in COST_COLUMNS], w=24, h=8, instant=True,
              transformations=[
                  {"id": "merge", "options": {}},
                  {"id": "convertFieldType", "options": {"fields": {}, "conversions": [
                      {"targetField": name, "destinationType": "number"} for name in ("stage", "concurrency", "rate")]}},
                  {"id": "organize", "options": {
                      "excludeByName": {"Time": True},
                      "renameByName": {f"Value #{refs[i]}": title for i, (_, title, _) in enumerate(COST_COLUMNS)}}},
                  {"id": "sortBy", "options": {"sort": [{"field": "stage"}]}}],
              fieldConfig={"defaults": {"unit": "short", "decimals": 2, "custom": {}}, "overrides": [
                  {"matcher": {"id": "byName", "options": title}, "properties": [{"id": "unit", "value": unit}]}
                  for _, title, unit in COST_COLUMNS if unit != "short"]},
              options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False}})


# The drift series of loadgen.stats.drift.SERIES and the unit of their slope per hour, for the drift
# table's columns: (series label, column title, Grafana unit)
DRIFT_COLUMNS = (
    ("throughput", "output tok/s per h", "short"),
    ("ttft_p99", "TTFT p99 per h", "s"),
    ("itl_p99", "ITL p99 per h", "s"),
    ("itl_p50", "ITL p50 per h", "s"),
    ("error_rate", "error ratio per h", "percentunit"),
    ("kv_usage", "KV use per h", "percentunit"),
    ("preemptions", "preemptions/min per h", "short"),
)


def soak_row(lay: Layout) -> None:
    """A soak's time slices (--slice-s, docs/soak.md): the latest closed slice's figures over time
    (loadgen.export.slice_gauges; a step per slice), and each sliced stage's drift verdict with its
    slopes."""
    lay.row("Soak: time slices and drift")
    note = " Each point is the latest closed time slice (--slice-s); the line steps when a slice closes."
    lay.panel("timeseries", "Slice output tokens/s",
              "Output tokens that arrived in the latest closed slice / its seconds." + note,
              [(f"sum(llm_loadgen_slice_output_tokens_per_second{L})", "output tok/s")], w=6)
    lay.panel("timeseries", "Slice TTFT and E2E p99",
              "TTFT p99 and E2E p99 of the requests completed in the latest closed slice (a slice of "
              "fewer than 100 requests: its slowest request or next to it)." + note,
              [(f"max(llm_loadgen_slice_ttft_p99_seconds{L})", "TTFT p99"),
               (f"max(llm_loadgen_slice_e2e_p99_seconds{L})", "E2E p99")], "s", w=6)
    lay.panel("timeseries", "Slice ITL p99",
              "Per-token ITL p99 of the requests completed in the latest closed slice." + note,
              [(f"max(llm_loadgen_slice_itl_p99_seconds{L})", "ITL p99")], "s", w=6)
    lay.panel("timeseries", "Slice requests, errors and KV use",
              "Ok requests completed in the latest closed slice (left axis); failed / completed requests "
              "and the server's mean KV use over the slice (right axis, 0-1; KV use needs the server's "
              "/metrics)." + note,
              [(f"sum(llm_loadgen_slice_requests{L})", "ok requests"),
               (f"max(llm_loadgen_slice_error_ratio{L})", "error ratio"),
               (f"max(llm_loadgen_slice_server_kv_usage_ratio{L})", "server KV use")], w=6,
              fieldConfig={"defaults": {"unit": "short", "custom": {}}, "overrides": [
                  {"matcher": {"id": "byName", "options": name},
                   "properties": [{"id": "unit", "value": "percentunit"},
                                  {"id": "custom.axisPlacement", "value": "right"}]}
                  for name in ("error ratio", "server KV use")]})
    lay.panel("stat", "Latest slice",
              "The stage of the latest closed slice and where the slice began, seconds after the stage's "
              "window opened.",
              [(f"max by (stage) (llm_loadgen_slice_start_seconds{L})", "stage {{stage}}: slice start")],
              "s", w=6, h=8)
    slopes = f"max by (stage, series) (llm_loadgen_stage_drift_slope_per_hour{L})"
    state = f'label_replace(max by (stage) (llm_loadgen_stage_drift{L}), "series", "drift", "", "")'
    lay.panel("table", "Drift by stage",
              "Each sliced stage once its last slice closed: drift (a series moved beyond its threshold per "
              "hour, p < drift.alpha) or steady, and Sen's slope per hour of every series tested (Mann-Kendall "
              "+ Sen's slope over the stage's slices; a series with too few slices is blank). The verdict line "
              "with the intervals and since when: the console, summary.json and report.html.",
              [(f"{slopes} or {state}", "")], w=18, h=8, instant=True,
              transformations=[
                  {"id": "groupingToMatrix", "options": {"columnField": "series", "rowField": "stage",
                                                         "valueField": "Value"}},
                  {"id": "organize", "options": {
                      "indexByName": {"stage\\series": 0, "drift": 1,
                                      **{name: i + 2 for i, (name, _, _) in enumerate(DRIFT_COLUMNS)}},
                      "renameByName": {"stage\\series": "stage", "drift": "verdict",
                                       **{name: title for name, title, _ in DRIFT_COLUMNS}}}},
                  {"id": "sortBy", "options": {"sort": [{"field": "stage"}]}}],
              fieldConfig={"defaults": {"unit": "short", "decimals": 3, "custom": {}}, "overrides": [
                  {"matcher": {"id": "byName", "options": "verdict"}, "properties": [
                      {"id": "mappings", "value": [{"type": "value", "options": {
                          "0": {"text": "steady", "color": "green", "index": 0},
                          "1": {"text": "drift", "color": "red", "index": 1}}}]},
                      {"id": "custom.cellOptions", "value": {"type": "color-background"}}]},
                  *({"matcher": {"id": "byName", "options": title}, "properties": [{"id": "unit", "value": unit}]}
                    for _, title, unit in DRIFT_COLUMNS if unit != "short")]},
              options={"showHeader": True, "cellHeight": "sm", "footer": {"show": False}})


def variable(name: str, label: str, query: str, default: str, include_all: bool = False) -> dict:
    var = {"name": name, "label": label, "type": "query", "datasource": DS,
           "definition": query, "query": {"query": query, "refId": f"{name}-query"},
           "refresh": 2, "sort": 1, "hide": 0, "multi": include_all, "includeAll": include_all,
           "current": {"text": default, "value": default}, "options": [], "regex": ""}
    if include_all:
        var["allValue"] = ".*"
        var["current"] = {"text": ["All"], "value": ["$__all"]}
    return var


def build() -> dict:
    lay = Layout()
    loadgen_rows(lay)
    clocks_row(lay)
    stages_row(lay)
    soak_row(lay)
    server_rows(lay)
    templating = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {"text": "Prometheus", "value": "prometheus"}, "hide": 0, "refresh": 1,
         "regex": "", "options": []},
        variable("loadgen_job", "Load generator job", "label_values(llm_loadgen_requests_total, job)",
                 "llm-loadgen"),
        variable("model", "Model", 'label_values(llm_loadgen_requests_total{job=~"$loadgen_job"}, model)',
                 "", include_all=True),
        variable("server_job", "Server job", "label_values(up, job)", "llm-server"),
    ]
    return {
        "uid": "llm-loadgen", "title": "llm-loadgen", "tags": ["llm", "load-test", "vllm", "sglang"],
        "description": "Load generator metrics next to the vLLM/SGLang server's own.",
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-30m", "to": "now"}, "refresh": "5s", "timezone": "",
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "name": "Annotations & Alerts",
                                  "type": "dashboard", "iconColor": "rgba(0, 211, 255, 1)"}]},
        "templating": {"list": templating},
        "panels": lay.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
