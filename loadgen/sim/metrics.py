"""The simulator's ``/metrics``: flavor-specific names like the real servers, read at scrape time.

One ``SimCollector`` per server instance, registered in a fresh ``CollectorRegistry``; it yields
metric families from live state (model gauges, counters, histograms kept here), so nothing is
global. Every sample carries a ``model_name`` label. Latencies are wall-clock seconds as a client on
this machine measures them (simulated seconds = wall seconds * ``llmsim_time_scale``).

- TTFT = time the first content chunk was written - time the request was parsed.
- ITL, vLLM flavor: one sample per chunk = gap since the previous chunk of the request.
- ITL, SGLang flavor: per chunk of n tokens, n samples of gap / n; the sum grows by the gap.
- Request latencies, observed when the request finishes normally (as vLLM does), from the same clock:
  queue = first admission into the batch (the engine step's start) - parsed (0 with fixed timing);
  prefill (vLLM) = first content chunk written - first admission; decode (vLLM) = last chunk - first
  chunk; E2E = last chunk - parsed. So TTFT = queue + prefill and E2E = TTFT + decode exactly.
  Writes delayed outside the simulator (a relay, the network) are in none of these.
- Token counters count tokens actually written to clients: prompt tokens when a request's first
  content chunk is written, generation tokens per chunk.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from loadgen.sim.faults import FAULT_KINDS

VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                     7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0, 20.0, 40.0, 80.0)
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                      0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)

# Request latencies (vLLM's request_latency_buckets; SGLang's E2E and queue-time buckets)
VLLM_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800)
SGLANG_QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500)
REQUEST_PARTS = {  # histogram (without the flavor prefix) -> its doc, per flavor
    "vllm": (("request_queue_time_seconds", "queue", "Histogram of time spent in WAITING phase for request."),
             ("request_prefill_time_seconds", "prefill", "Histogram of time spent in PREFILL phase for request."),
             ("request_decode_time_seconds", "decode", "Histogram of time spent in DECODE phase for request."),
             ("e2e_request_latency_seconds", "e2e", "Histogram of e2e request latency in seconds.")),
    "sglang": (("queue_time_seconds", "queue", "Histogram of queueing time in seconds."),
               ("e2e_request_latency_seconds", "e2e", "Histogram of End-to-end request latency in seconds")),
}


class Histogram:
    """Fixed-edge histogram: per-bucket counts (non-cumulative) plus +Inf, and a sum."""

    def __init__(self, edges: tuple[float, ...]):
        self.edges = edges
        self.counts = [0] * (len(edges) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: int = 1, sum_add: float | None = None) -> None:
        self.counts[bisect.bisect_left(self.edges, value)] += n
        self.sum += value * n if sum_add is None else sum_add

    def buckets(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for edge, c in zip(self.edges, self.counts, strict=False):
            acc += c
            out.append((repr(float(edge)), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out


class SimMetrics:
    """Counters and histograms fed by the streams; gauges come from the model at scrape time."""

    def __init__(self, flavor: str):
        self.flavor = flavor
        vllm = flavor == "vllm"
        self.ttft = Histogram(VLLM_TTFT_BUCKETS if vllm else SGLANG_TTFT_BUCKETS)
        self.itl = Histogram(VLLM_ITL_BUCKETS if vllm else SGLANG_ITL_BUCKETS)
        self.queue = Histogram(VLLM_REQUEST_BUCKETS if vllm else SGLANG_QUEUE_BUCKETS)
        self.prefill = Histogram(VLLM_REQUEST_BUCKETS)
        self.decode = Histogram(VLLM_REQUEST_BUCKETS)
        self.e2e = Histogram(VLLM_REQUEST_BUCKETS if vllm else SGLANG_E2E_BUCKETS)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests_ok = 0
        self.rejected: dict[str, int] = {"queue_full": 0, "bad_request": 0, "strict": 0, "unknown_model": 0}
        self.faults: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)

    def first_chunk(self, ttft_s: float, prompt_tokens: int, n: int) -> None:
        self.ttft.observe(ttft_s)
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += n

    def request_done(self, queue_s: float, prefill_s: float, decode_s: float, e2e_s: float) -> None:
        """A request finished normally: its parts (module docstring), observed now."""
        for hist, value in ((self.queue, queue_s), (self.prefill, prefill_s), (self.decode, decode_s),
                            (self.e2e, e2e_s)):
            hist.observe(value)

    def next_chunk(self, gap_s: float, n: int) -> None:
        self.generation_tokens += n
        if self.flavor == "vllm":
            self.itl.observe(gap_s)
        else:
            self.itl.observe(gap_s / n, n, gap_s)


def spec_draft_tokens(cfg) -> int:
    """Tokens drafted per speculative step: len(spec_accept) - 1 (0: no speculation)."""
    return len(cfg.spec_accept) - 1


def mean_accept_length(stats) -> float:
    """1 + accepted / drafts (vLLM's formula; SGLang's accept length counts the verified token too)."""
    return 1 + stats.spec_accepted_tokens_total / stats.spec_drafts_total if stats.spec_drafts_total else 0.0


def _spec_decode(cfg, model, p: str, counter, gauge) -> Iterator:
    """Speculative decoding (engine with spec_accept): vLLM's counters, SGLang's accept-length gauge
    (here the mean over every speculative step since the start; SGLang's covers its recent batches)."""
    if cfg.timing != "engine" or not spec_draft_tokens(cfg):
        return
    st = model.stats
    if cfg.flavor == "vllm":
        yield counter(p + "spec_decode_num_drafts", "Number of spec decoding drafts.", st.spec_drafts_total)
        yield counter(p + "spec_decode_num_draft_tokens", "Number of draft tokens.",
                      st.spec_drafts_total * spec_draft_tokens(cfg))
        yield counter(p + "spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                      st.spec_accepted_tokens_total)
    else:
        yield gauge(p + "spec_accept_length", "The average acceptance length of speculative decoding.",
                    mean_accept_length(st))


class SimCollector:
    """prometheus_client custom collector over one server's state."""

    def __init__(self, server):
        self.server = server  # a SimServer: .config, .model, .runner, .metrics

    def collect(self) -> Iterator:
        s = self.server
        cfg, model, m = s.config, s.model, s.metrics
        lab, val = ["model_name"], [cfg.model]
        leak = cfg.drift_kv_leak_tokens_per_h * s.runner.now_s() / 3600  # a leak's reported use (drift)
        kv_frac = min((model.kv_used + leak) / cfg.kv_tokens, 1.0) if cfg.kv_tokens else 0.0
        p = cfg.flavor + ":"

        def gauge(name, doc, value):
            g = GaugeMetricFamily(name, doc, labels=lab)
            g.add_metric(val, value)
            return g

        def counter(name, doc, value):
            c = CounterMetricFamily(name, doc, labels=lab)
            c.add_metric(val, value)
            return c

        def hist(name, doc, h):
            f = HistogramMetricFamily(name, doc, labels=lab)
            f.add_metric(val, h.buckets(), h.sum)
            return f

        if cfg.flavor == "vllm":
            yield gauge(p + "num_requests_running", "Requests in the model execution batch.", model.num_running)
            yield gauge(p + "num_requests_waiting", "Requests waiting to be processed.", model.num_waiting)
            yield gauge(p + "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_frac)
            yield counter(p + "num_preemptions", "Cumulative number of preemptions.",
                          model.stats.preemptions_total)
            info = GaugeMetricFamily(p + "cache_config_info", "Information of the KV cache config.",
                                     labels=["model_name", "block_size", "num_gpu_blocks",
                                             "kv_cache_size_tokens", "cache_dtype"])
            info.add_metric([cfg.model, str(cfg.block_size), str(cfg.kv_tokens // cfg.block_size),
                             str(cfg.kv_tokens), "auto"], 1)
            yield info
        else:
            yield gauge(p + "num_running_reqs", "The number of running requests.", model.num_running)
            yield gauge(p + "num_queue_reqs", "The number of requests in the waiting queue.", model.num_waiting)
            yield gauge(p + "token_usage", "The token usage.", kv_frac)
            yield gauge(p + "num_used_tokens", "The number of used tokens.", model.kv_used)
            yield gauge(p + "max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                        cfg.kv_tokens)
            yield counter(p + "num_retracted_requests", "Number of retracted requests.",
                          model.stats.preemptions_total)
        cache = getattr(model, "prefix_cache", None)  # engine model with prefix caching on
        if cache is not None and cfg.flavor == "vllm":
            yield counter(p + "prefix_cache_queries", "Prefix cache queries, in tokens.", cache.queried_tokens)
            yield counter(p + "prefix_cache_hits", "Prefix cache hits, in tokens.", cache.hit_tokens)
        elif cache is not None:
            rate = cache.hit_tokens / cache.queried_tokens if cache.queried_tokens else 0.0
            yield gauge(p + "cache_hit_rate", "The prefix cache hit rate.", rate)
        yield from _spec_decode(cfg, model, p, counter, gauge)
        yield counter(p + "prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens)
        yield counter(p + "generation_tokens", "Number of generation tokens processed.", m.generation_tokens)
        yield hist(p + "time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft)
        yield hist(p + "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl)
        for name, part, doc in REQUEST_PARTS[cfg.flavor]:
            yield hist(p + name, doc, getattr(m, part))
        yield from self._llmsim(counter, gauge)

    def _llmsim(self, counter, gauge) -> Iterator:
        s = self.server
        yield counter("llmsim_steps", "Engine steps (fixed model: timer passes) run.", s.runner.steps_total)
        yield counter("llmsim_step_overruns",
                      "Steps whose wall time exceeded their scaled duration: the simulator fell behind.",
                      s.runner.overruns_total)
        yield gauge("llmsim_time_scale", "Simulated seconds per wall second.", s.config.time_scale)
        faults = CounterMetricFamily("llmsim_faults_injected", "Faults injected, by kind.",
                                     labels=["model_name", "kind"])
        for kind, n in s.metrics.faults.items():
            faults.add_metric([s.config.model, kind], n)
        yield faults
        rejected = CounterMetricFamily("llmsim_rejected_requests", "Requests refused before generation.",
                                       labels=["model_name", "reason"])
        for reason, n in s.metrics.rejected.items():
            rejected.add_metric([s.config.model, reason], n)
        yield rejected
        yield counter("llmsim_requests_completed", "Requests that finished normally.", s.metrics.requests_ok)
