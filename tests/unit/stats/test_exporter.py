"""Exporter: exposition built from a real Collector, parsed back with prometheus_client's parser.

Requests go through the real pipeline (SSE payloads -> RequestRecord with a fake clock ->
RequestResult -> Collector), so the expected counts and sums are computed from what was sent.
"""

from __future__ import annotations

import json
import math
import urllib.request

import numpy as np
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.errors import FAILURE_KINDS, OVERLOAD_503, READ_TIMEOUT, ConfigError, RequestError
from loadgen.export import exporter
from loadgen.export.exporter import ExporterSnapshot, exporter_from_config, make_registry, start_exporter
from loadgen.stats import metrics
from loadgen.stats.records import RequestRecord
from loadgen.stats.stage_stats import Collector

LABELS = {"model": "m1", "endpoint": "/v1/completions", "scenario": "seed"}


class Source:
    """An ExporterSource whose snapshot fields the test sets directly."""

    def __init__(self, collector: Collector, **fields):
        self.collector = collector
        self.fields = {**LABELS, **fields}

    def exporter_snapshot(self) -> ExporterSnapshot:
        return ExporterSnapshot(totals=self.collector.totals, **self.fields)


def completions_stream(sent: float, ttft: float, gaps: list[float], tokens: list[int], prompt: int):
    """Payloads of a /v1/completions stream with cumulative usage on every chunk; (payload, t) pairs."""
    t, ct, out = sent + ttft, 0, []
    for i, n in enumerate(tokens):
        if i:
            t += gaps[i - 1]
        ct += n
        last = i == len(tokens) - 1
        obj = {"choices": [{"text": "x" * n, "finish_reason": "length" if last else None}],
               "usage": {"prompt_tokens": prompt, "completion_tokens": ct}}
        out.append((json.dumps(obj).encode(), t))
    out.append((b"[DONE]", t))
    return out


def run_request(collector: Collector, sent, ttft, gaps, tokens, prompt=100, objectives=None):
    rec = RequestRecord(sent, sum(tokens), "/v1/completions")
    collector.request_started(None)
    seen = 0
    for payload, t in completions_stream(sent, ttft, gaps, tokens, prompt):
        rec.on_payload(payload, t)
        collector.add_window_tokens(None, rec.chunk_tokens_seen - seen)
        seen = rec.chunk_tokens_seen
    result = rec.finish(t, eof=True)
    collector.request_finished(None)
    collector.record_result(result, None, prompt, sum(tokens), objectives)
    return result


def fail_request(collector: Collector, kind: str, sent: float, payloads=(), objectives=None):
    rec = RequestRecord(sent, 10, "/v1/completions")
    for payload, t in payloads:
        rec.on_payload(payload, t)
    result = rec.fail(RequestError(kind, "test"), sent + 0.5)
    collector.record_result(result, None, 100, 10, objectives)
    return result


def scrape(registry) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} of one exposition, via the text parser."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples, name, **labels):
    key = (name, tuple(sorted({**LABELS, **labels}.items())))
    return samples[key]


def buckets(samples, name) -> list[tuple[float, float]]:
    out = [(float(dict(k)["le"]), v) for (n, k), v in samples.items() if n == f"{name}_bucket"]
    return sorted(out)


def test_exposition_counts_what_was_recorded():
    c = Collector()
    ttfts = [0.05, 0.2, 1.5, 30.0]
    shapes = [([0.02, 0.02, 0.03], [1, 1, 2, 1]), ([0.05], [3, 2]), ([0.01] * 5, [1] * 6),
              ([0.4, 0.1], [1, 4, 1])]
    ok = [run_request(c, 10.0 * i, ttft, gaps, toks, prompt=100 + i)
          for i, (ttft, (gaps, toks)) in enumerate(zip(ttfts, shapes, strict=True))]
    chunk = json.dumps({"choices": [{"text": "ab", "finish_reason": None}]}).encode()
    failed = [fail_request(c, READ_TIMEOUT, 100.0, [(chunk, 100.2), (chunk, 100.3)]),
              fail_request(c, OVERLOAD_503, 200.0)]
    s = scrape(make_registry(Source(c, inflight=0, users=4)))

    assert value(s, "llm_loadgen_requests_total", outcome="ok", kind="ok") == 4
    assert value(s, "llm_loadgen_requests_total", outcome="error", kind=READ_TIMEOUT) == 1
    assert value(s, "llm_loadgen_requests_total", outcome="overload", kind=OVERLOAD_503) == 1
    by_kind = {dict(k)["kind"]: v for (n, k), v in s.items() if n == "llm_loadgen_requests_total"}
    assert set(by_kind) == {"ok", *FAILURE_KINDS}  # every kind exported, at 0 until it happens
    assert sum(by_kind.values()) == 6
    assert value(s, "llm_loadgen_output_tokens_total") == sum(r.completion_tokens for r in ok) == 22
    assert value(s, "llm_loadgen_input_tokens_total") == 100 + 101 + 102 + 103
    assert value(s, "llm_loadgen_failed_output_tokens_total") == sum(r.completion_tokens for r in failed) == 2
    # live counter: every token seen as it arrived, failed requests included
    assert value(s, "llm_loadgen_received_output_tokens_total") == 22

    # _count and _sum are exact
    assert value(s, "llm_loadgen_ttft_seconds_count") == 4
    assert value(s, "llm_loadgen_ttft_seconds_sum") == pytest.approx(sum(ttfts), rel=1e-12)
    assert value(s, "llm_loadgen_e2e_seconds_count") == 4
    assert value(s, "llm_loadgen_e2e_seconds_sum") == pytest.approx(sum(r.e2e_s for r in ok), rel=1e-12)
    n_tokens_after_first = sum(sum(toks[1:]) for _, toks in shapes)
    assert value(s, "llm_loadgen_itl_seconds_count") == n_tokens_after_first == 4 + 2 + 5 + 5
    # per-token ITL sum = sum over chunks of (gap / n) * n = sum of all gaps
    all_gaps = sum(sum(g) for g, _ in shapes)
    assert value(s, "llm_loadgen_itl_seconds_sum") == pytest.approx(all_gaps, rel=1e-9)
    assert value(s, "llm_loadgen_itl_chunk_seconds_count") == sum(len(g) for g, _ in shapes)
    assert value(s, "llm_loadgen_tpot_seconds_count") == 4

    # TTFT buckets at decade edges are exact: 0.05 | 0.2 | 1.5 | 30
    ttft_b = dict(buckets(s, "llm_loadgen_ttft_seconds"))
    assert (ttft_b[0.01], ttft_b[0.1], ttft_b[1.0], ttft_b[10.0], ttft_b[100.0]) == (0, 1, 2, 3, 4)
    assert ttft_b[math.inf] == 4
    assert value(s, "llm_loadgen_users") == 4


def test_buckets_are_cumulative_and_end_at_count():
    c = Collector()
    rng = np.random.default_rng(7)
    for i in range(60):
        n = int(rng.integers(2, 30))
        run_request(c, float(i), float(rng.lognormal(-1, 1)), list(rng.lognormal(-4, 1, n - 1)),
                    [int(x) for x in rng.integers(1, 4, n)])
        c.request_scheduled(None, float(rng.lognormal(-6, 1)))  # open-loop send lateness
    s = scrape(make_registry(Source(c)))
    for h in exporter.HISTOGRAMS:
        name, edges = h.exporter, h.edges
        bs = buckets(s, f"llm_loadgen_{name}")
        assert [le for le, _ in bs] == [*edges, math.inf]
        counts = [v for _, v in bs]
        assert counts == sorted(counts), name
        assert counts[-1] == value(s, f"llm_loadgen_{name}_count")
        assert counts[0] < counts[-1], f"{name}: every sample in the first bucket, edges too coarse"


def test_counters_and_buckets_never_decrease_across_scrapes():
    """Scrape after every batch; a sample larger than all before must not shrink any bucket."""
    master, workers = Collector(), [Collector(), Collector()]
    registry = make_registry(Source(master))
    rng = np.random.default_rng(3)
    prev: dict = {}
    for step in range(12):
        for w in workers:
            for _ in range(int(rng.integers(0, 4))):
                scale = 10.0 ** (step % 4 - 2)  # small values, then ever larger, then small again
                n = int(rng.integers(2, 12))
                run_request(w, float(step), 0.499 * scale, [0.0499 * scale] * (n - 1), [1] * n)
            if step % 3 == 0:
                fail_request(w, READ_TIMEOUT, float(step))
            master.merge_delta(w.take_delta())  # the master path: worker deltas merged
        now = scrape(registry)
        monotone = {k: v for k, v in now.items()
                    if k[0].endswith(("_total", "_bucket", "_count", "_sum"))}
        for key, v in monotone.items():
            assert v >= prev.get(key, 0), f"{key} went from {prev.get(key)} to {v} at step {step}"
        prev = monotone
    assert prev[("llm_loadgen_ttft_seconds_count", tuple(sorted(LABELS.items())))] > 20


def test_gauges_phase_and_absent_optionals():
    c = Collector()
    src = Source(c, inflight=7, users=8, stage_index=2, target_concurrency=8, phase="measure",
                 kv_projected_tokens=12000.0, kv_capacity_tokens=50000.0, guard_breaches=1,
                 client_cpu_percent=35.5, client_loop_lag_s=0.002)
    s = scrape(make_registry(src))
    assert value(s, "llm_loadgen_inflight_requests") == 7
    assert value(s, "llm_loadgen_stage") == 2
    assert value(s, "llm_loadgen_target_concurrency") == 8
    assert value(s, "llm_loadgen_kv_projected_tokens") == 12000
    assert value(s, "llm_loadgen_kv_capacity_tokens") == 50000
    assert value(s, "llm_loadgen_guard_breaches_total") == 1
    assert value(s, "llm_loadgen_client_cpu_percent") == 35.5
    assert value(s, "llm_loadgen_client_loop_lag_seconds") == 0.002
    phases = {dict(k)["phase"]: v for (n, k), v in s.items() if n == "llm_loadgen_phase"}
    assert phases == {p: float(p == "measure") for p in exporter.PHASES}

    s = scrape(make_registry(Source(c)))  # nothing known yet: absent, not a misleading 0
    names = {n for n, _ in s}
    for absent in ("llm_loadgen_stage", "llm_loadgen_kv_capacity_tokens", "llm_loadgen_client_cpu_percent",
                   "llm_loadgen_server_spec_accept_length", "llm_loadgen_server_prefix_cache_hit_ratio",
                   "llm_loadgen_stage_finished", "llm_loadgen_stage_breakdown_seconds",
                   "llm_loadgen_stage_usd_per_million_output_tokens"):
        assert absent not in names


def test_names_units_and_labels_follow_prometheus_conventions():
    c = Collector()
    run_request(c, 0.0, 0.1, [0.01], [1, 1])
    text = generate_latest(make_registry(Source(c, stage_index=1, client_cpu_percent=1.0,
                                                stages=stage_rows()))).decode()
    fams = list(text_string_to_metric_families(text))
    assert fams
    for fam in fams:
        assert fam.name.startswith("llm_loadgen_") and ":" not in fam.name
        assert fam.documentation, fam.name
        if fam.type == "counter":
            assert all(s.name.endswith("_total") for s in fam.samples)
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds")
        for s in fam.samples:
            assert set(s.labels) <= {"model", "endpoint", "scenario", "outcome", "kind", "phase", "le",
                                     "stage", "concurrency", "rate", "clock", "metric", "stat", "part"}
            assert {k: s.labels[k] for k in LABELS} == LABELS
    helps = {f.name: f.documentation for f in fams}
    assert "per-token" in helps["llm_loadgen_itl_seconds"].lower()


def test_edges_cover_llm_ranges_and_server_edges():
    for server in (metrics.VLLM_ITL_EDGES, metrics.SGLANG_ITL_EDGES):
        assert set(server) <= set(metrics.ITL_EDGES)
    for server in (metrics.VLLM_TTFT_EDGES, metrics.SGLANG_TTFT_EDGES):
        assert set(server) <= set(metrics.TTFT_EDGES)
    for server in (metrics.VLLM_E2E_EDGES, metrics.SGLANG_E2E_EDGES):
        assert set(server) <= set(metrics.E2E_EDGES)
    assert metrics.ITL_EDGES[0] == 0.001
    assert metrics.TTFT_EDGES[0] == 0.001 and metrics.TTFT_EDGES[-1] >= 600
    assert metrics.E2E_EDGES[-1] >= 1800
    for edges in (metrics.ITL_EDGES, metrics.TTFT_EDGES, metrics.E2E_EDGES):
        assert list(edges) == sorted(set(edges))
        ratios = np.array(edges[1:]) / np.array(edges[:-1])
        assert ratios.max() <= 4.0  # fine enough for histogram_quantile interpolation


def test_start_exporter_ephemeral_port_serves_metrics_and_stops():
    c = Collector()
    run_request(c, 0.0, 0.1, [0.01], [1, 1])
    handle = start_exporter("127.0.0.1", 0, Source(c))
    try:
        assert handle.port > 0
        with urllib.request.urlopen(handle.url, timeout=5) as resp:
            body = resp.read().decode()
        assert 'llm_loadgen_output_tokens_total{endpoint="/v1/completions",model="m1",scenario="seed"} 2.0' in body
        with pytest.raises(ConfigError, match="exporter.port.*already in use"):
            start_exporter("127.0.0.1", handle.port, Source(c))
    finally:
        handle.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(handle.url, timeout=2)


def test_config_port_zero_means_off():
    assert exporter_from_config("127.0.0.1", 0, Source(Collector())) is None


def test_slo_counters_and_gauges_only_with_objectives():
    from loadgen.slo.objectives import Objectives

    obj = Objectives(ttft_s=1.0)
    c = Collector()
    ok = [run_request(c, 10.0 * i, ttft, [0.01], [2, 3], objectives=obj) for i, ttft in enumerate((0.05, 0.2, 1.5))]
    fail_request(c, OVERLOAD_503, 100.0, objectives=obj)
    s = scrape(make_registry(Source(c, slo_attainment_target=0.99, slo_stage_attainment=0.5)))
    assert value(s, "llm_loadgen_slo_met_requests_total") == 2  # TTFT 1.5 s and the 503 miss
    assert value(s, "llm_loadgen_slo_met_output_tokens_total") == ok[0].completion_tokens * 2 == 10
    assert value(s, "llm_loadgen_slo_attainment_ratio") == 0.5
    assert value(s, "llm_loadgen_slo_attainment_target_ratio") == 0.99
    names = {n for n, _ in scrape(make_registry(Source(c)))}  # no objectives: no SLO series at all
    assert not {n for n in names if "_slo_" in n}


def stage_rows() -> tuple[dict, ...]:
    """Three finished stages as summary.json has them: C=4 with the clocks' breakdown, the server's
    window figures and a price; C=8 with fewer figures; a rate stage (4 req/s) with none."""
    from loadgen.analysis.breakdown import breakdown
    from loadgen.stats.cost import CostConfig, stage_cost

    client = {"ttft": {"mean_s": 0.35, "p50_s": 0.3, "p90_s": None, "p99_s": 0.6}, "e2e": None, "itl": None}
    server = {"ttft": {"count": 5, "mean_s": 0.3, "p50_s": 0.28, "p90_s": None, "p99_s": 0.5},
              "queue": {"count": 5, "mean_s": 0.2}, "prefill": {"count": 5, "mean_s": 0.08},
              "spec_accept_length": 2.8, "spec_acceptance_rate": 0.6, "prefix_cache_hit_rate": 0.75}
    first = {"index": 0, "concurrency": 4, "output_tokens_per_s": 1000.0, "input_tokens": 20_000, "window_s": 10.0,
             "server": server, "breakdown": breakdown(client, server)}
    first.update(stage_cost(first, CostConfig(gpus=2, gpu_hour_usd=2.5)))
    first.update(itl_chunk_p50_s=0.02, itl_chunk_p90_s=0.03, itl_chunk_p99_s=0.05)
    second = {"index": 1, "concurrency": 8, "output_tokens_per_s": 1800.0, "input_tokens": 0, "window_s": 10.0,
              "server": {"spec_accept_length": 2.5, "spec_acceptance_rate": None}}
    second.update(stage_cost(second, CostConfig(gpus=2)))  # no price: per-GPU figures only
    rate = {"index": 2, "concurrency": None, "offered_rate_per_s": 4.0, "output_tokens_per_s": 900.0}
    return first, second, rate


def by_stage(samples, name, **labels) -> dict[str, float]:
    """{stage label: value} of one family's samples that carry ``labels``."""
    return {dict(k)["stage"]: v for (n, k), v in samples.items()
            if n == name and all(dict(k).get(lk) == lv for lk, lv in labels.items())}


def test_each_finished_stage_is_exported_with_its_stage_labels():
    s = scrape(make_registry(Source(Collector(), stages=stage_rows())))
    finished = {dict(k)["stage"]: (dict(k)["concurrency"], dict(k)["rate"], v)
                for (n, k), v in s.items() if n == "llm_loadgen_stage_finished"}
    assert finished == {"0": ("4", "", 0.0), "1": ("8", "", 1.0), "2": ("", "4", 2.0)}  # value: the index
    lat = {(dict(k)["clock"], dict(k)["stat"]): v for (n, k), v in s.items()
           if n == "llm_loadgen_stage_latency_seconds" and dict(k)["stage"] == "0"}
    assert lat[("client", "p50")] == 0.3 and lat[("server", "p50")] == 0.28 and lat[("server", "mean")] == 0.3
    assert ("server", "p90") not in lat  # the server had no figure: absent, not 0
    parts = {dict(k)["part"]: v for (n, k), v in s.items()
             if n == "llm_loadgen_stage_breakdown_seconds" and dict(k)["concurrency"] == "4"}
    assert parts == pytest.approx({"queue": 0.2, "prefill": 0.08, "server_rest": 0.02, "network_client": 0.05})
    assert set(by_stage(s, "llm_loadgen_stage_breakdown_seconds")) == {"0"}  # only C=4 had the clocks
    assert by_stage(s, "llm_loadgen_server_spec_accept_length") == {"0": 2.8, "1": 2.5}
    assert by_stage(s, "llm_loadgen_server_spec_acceptance_ratio") == {"0": 0.6}
    assert by_stage(s, "llm_loadgen_server_prefix_cache_hit_ratio") == {"0": 0.75}
    # the client's chunk gaps at p50/p90/p99, with or without the server's histograms; absent elsewhere
    gaps = {dict(k)["stat"]: v for (n, k), v in s.items() if n == "llm_loadgen_stage_itl_chunk_seconds"}
    assert gaps == {"p50": 0.02, "p90": 0.03, "p99": 0.05}


def test_cost_figures_are_exported_per_stage_with_the_formulas_values():
    s = scrape(make_registry(Source(Collector(), stages=stage_rows())))
    # 2 GPUs at 2.5 an hour: C=4 serves 1000 output tok/s and 2000 input tok/s (20,000 in 10 s)
    assert by_stage(s, "llm_loadgen_stage_output_tokens_per_gpu_per_second") == {"0": 500.0, "1": 900.0}
    assert by_stage(s, "llm_loadgen_stage_total_tokens_per_gpu_per_second") == {"0": 1500.0, "1": 900.0}
    assert by_stage(s, "llm_loadgen_stage_usd_per_million_output_tokens") == {
        "0": pytest.approx(2.5 * 2 / (1000 * 3600) * 1e6)}  # C=8 has no price: absent
    assert by_stage(s, "llm_loadgen_stage_usd_per_million_total_tokens") == {
        "0": pytest.approx(2.5 * 2 / (3000 * 3600) * 1e6)}
    names = {n for n, _ in scrape(make_registry(Source(Collector(), stages=stage_rows()[2:])))}
    assert not {n for n in names if "per_gpu" in n or "usd" in n}  # an unpriced run has no cost series




def test_soak_gauges_show_the_latest_slice_and_each_stage_drift_state():
    c = Collector()
    latest = {"stage": 0, "slice": 7, "start_s": 420.0, "output_tokens_per_s": 2900.0, "ttft_p99_s": None,
              "requests": 1800, "error_rate": 0.0}
    drift = {"drift": True, "series": {"throughput": {"slope_per_h": -120.0}, "kv_usage": {"slope_per_h": 0.1}}}
    rows = ({**stage_rows()[0], "index": 0, "drift": drift},)
    samples = scrape(make_registry(Source(c, latest_slice=latest, stages=rows)))
    assert value(samples, "llm_loadgen_slice_output_tokens_per_second", stage="0") == 2900.0
    assert value(samples, "llm_loadgen_slice_start_seconds", stage="0") == 420.0
    assert not any(name == "llm_loadgen_slice_ttft_p99_seconds" for name, _ in samples)  # no figure: absent
    assert value(samples, "llm_loadgen_stage_drift", stage="0") == 1.0
    assert value(samples, "llm_loadgen_stage_drift_slope_per_hour", stage="0", series="throughput") == -120.0
    before = scrape(make_registry(Source(c)))
    assert not any(name.startswith(("llm_loadgen_slice_", "llm_loadgen_stage_drift")) for name, _ in before)
