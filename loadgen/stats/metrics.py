"""The stage metrics, declared once. Everything that shows a stage's figures derives from here.

Three tables, each a tuple of small frozen dataclasses:

- ``HISTOGRAMS``: the LogHistograms of a StageStats (what one sample is, the Prometheus name and
  ``le`` edges). ``loadgen.stats.stage_stats`` builds its fields from it, ``loadgen.export.exporter`` its histograms.
- ``COUNTERS``: the integer counters of a StageStats, with the exported ones' Prometheus names.
- ``STAGE_METRICS``: the figures of a stage row. Each has its summary.json key (also the
  stages.csv column, the web UI column key and the compare key), its source, its quantile, how it
  is shown (unit and scale), its title (web UI, compare) and, if the console table shows it, its
  column there. ``StageStats.row``, ``report.table`` (console and CSV), ``webui``, ``report.compare``
  all iterate this tuple; adding a percentile is one line here.

A metric's value (``StageMetric.value``): with a histogram source, its quantile ``q`` (nearest
fine bucket, within ~1.2%; None when the histogram is empty); with a counter source, its rate
count / window_s (None without a window). SLO figures read the stage's ``loadgen.slo.objectives.SloCounts``
(``StageStats.slo``): an ``SloCount`` source is a goodput, output tok/s x count / measured output
tokens (``loadgen.slo.objectives.goodput_per_s``), a ``Share`` source the ratio count / judged requests
(attainment, 0-1); both None when no request was judged (no objective set). Formulas of the per-request samples: loadgen.stats.records.
Failure kinds are declared in loadgen.errors (``KINDS``), not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.slo.objectives import goodput_per_s

# Default server bucket edges (seconds), read from vLLM v1 `PrometheusStatLogger` and SGLang
# `TokenizerMetricsCollector`. Including them makes `le` boundaries line up with the server panels.
VLLM_TTFT_EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                  10.0, 20.0, 40.0, 80.0)  # inter_token_latency and time_per_output_token
VLLM_E2E_EDGES = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
SGLANG_TTFT_EDGES = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_EDGES = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_E2E_EDGES = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
                    1200, 1800, 2400)


def log_grid(lo: float, hi: float, mantissas=(1, 2, 3, 5, 7.5)) -> list[float]:
    """Edges m * 10^e in [lo, hi]: a ~1.5x step, dense enough for histogram_quantile interpolation."""
    out, exp = [], -9
    while 10.0**exp <= hi:
        out += [round(m * 10.0**exp, 9) for m in mantissas if lo <= m * 10.0**exp <= hi]
        exp += 1
    return out


def merge_edges(*groups) -> tuple[float, ...]:
    return tuple(sorted({round(float(e), 9) for g in groups for e in g}))


# ITL from 1 ms; TTFT from 1 ms to ~43 min; E2E to ~2 h (30 min soak requests and vLLM's 7680 s).
ITL_EDGES = merge_edges(log_grid(0.001, 60), VLLM_ITL_EDGES, SGLANG_ITL_EDGES)
TTFT_EDGES = merge_edges(log_grid(0.001, 1800), VLLM_TTFT_EDGES, SGLANG_TTFT_EDGES)
E2E_EDGES = merge_edges(log_grid(0.01, 1800), VLLM_E2E_EDGES, SGLANG_E2E_EDGES)


@dataclass(frozen=True)
class Histogram:
    """A StageStats histogram (ok requests only). ``formula``: what one sample is (the exporter's
    HELP text); ``exporter``: Prometheus name after the prefix, "" = not exported."""

    attr: str
    unit: str
    formula: str
    exporter: str = ""
    edges: tuple[float, ...] = ()


@dataclass(frozen=True)
class Counter:
    """A StageStats integer counter; ``exporter``: Prometheus counter name ("" = not exported).
    ``peak``: a maximum, not a count: merged by max instead of sum, never exported as a counter."""

    attr: str
    formula: str
    exporter: str = ""
    peak: bool = False


TTFT = Histogram("ttft_s", "s", "Time to first token: t(first content chunk) - t(sent), one sample "
                 "per request.", "ttft_seconds", TTFT_EDGES)
ITL_TOKEN = Histogram("itl_token_s", "s", "Per-token inter-token latency: gap_i / n_i weighted by n_i "
                      "(n_i = tokens in chunk i), one sample per token; compare with server ITL "
                      "histograms.", "itl_seconds", ITL_EDGES)
ITL_CHUNK = Histogram("itl_chunk_s", "s", "Per-chunk gap t(chunk i) - t(chunk i-1), one sample per "
                      "chunk (vLLM-bench style ITL).", "itl_chunk_seconds", ITL_EDGES)
TPOT = Histogram("tpot_s", "s", "Time per output token per request: (E2E - TTFT) / (N - 1), N = "
                 "completion tokens.", "tpot_seconds", ITL_EDGES)
E2E = Histogram("e2e_s", "s", "End-to-end latency: t(last content chunk) - t(sent).", "e2e_seconds",
                E2E_EDGES)
DECODE_TPS = Histogram("decode_tps", "tok/s", "Per-request decode rate: (N - 1) / (E2E - TTFT).")
# Open-loop (rate) mode: one sample per request sent, ok or not (loadgen.locust_face.open_loop).
LATENESS_EDGES = merge_edges(log_grid(0.0001, 10))
LATENESS = Histogram("schedule_lateness_s", "s", "Client lateness of an open-loop request: t(actual send) "
                     "- t(scheduled send), one sample per request sent.", "schedule_lateness_seconds",
                     LATENESS_EDGES)
# The workload actually sent (loadgen.workload.asks): one sample per ok request, so a reader sees the
# length mix beside the result (report.html draws them; the row carries p50/p99).
INPUT_LEN = Histogram("input_len_tokens", "tokens", "Prompt tokens of one ok request: usage.prompt_tokens, "
                      "else the expected input length.")
OUTPUT_LEN = Histogram("output_len_tokens", "tokens", "Completion tokens of one ok request (usage, else "
                       "counted chunks).")
# A reasoning model's answer after its thinking (loadgen.stats.answer): samples of every ok request with
# answer text; without reasoning they equal TTFT and the decode rate.
TTFAT = Histogram("ttfat_s", "s", "Time to first answer token: t(first chunk with answer text: delta.content "
                  "or completions text) - t(sent), one sample per request; thinking (delta.reasoning_content "
                  "or delta.reasoning) before it; equals TTFT without reasoning.",
                  "time_to_first_answer_token_seconds", TTFT_EDGES)
ANSWER_DECODE_TPS = Histogram("answer_decode_tps", "tok/s", "Per-request decode rate of the answer: (A - 1) / "
                              "(t(last answer chunk) - t(first answer chunk)), A = completion - reasoning tokens.")
HISTOGRAMS = (TTFT, ITL_TOKEN, ITL_CHUNK, TPOT, E2E, DECODE_TPS, LATENESS, INPUT_LEN, OUTPUT_LEN, TTFAT,
              ANSWER_DECODE_TPS)

WINDOW_OUTPUT_TOKENS = Counter(
    "window_output_tokens",
    "Completion tokens of all requests, counted as their chunks arrive (per-chunk usage deltas, "
    "else 1 per content chunk).",
    "received_output_tokens",  # counted as chunks arrive: its rate stays smooth for long requests
)
COUNTERS = (
    Counter("requests_ok", "Successful requests (exported as requests_total{outcome=\"ok\"})."),
    Counter("input_tokens", "Prompt tokens of successful requests (server usage, else expected).",
            "input_tokens"),
    Counter("output_tokens", "Completion tokens of successful requests (server usage, else counted "
            "chunks).", "output_tokens"),
    Counter("failed_output_tokens", "Completion tokens received by requests that then failed.",
            "failed_output_tokens"),
    WINDOW_OUTPUT_TOKENS,
    Counter("mismatch_input", "Ok requests whose usage.prompt_tokens != the expected input tokens."),
    Counter("mismatch_output", "Ok requests with usage whose completion_tokens != the expected output."),
    Counter("tokens_estimated", "Ok requests without usage (tokens counted from chunks)."),
    Counter("textless_requests", "Ok requests whose tokens (server usage >= 1) came without text, timed "
            "by their finishing chunk (loadgen.stats.records: held-back partial UTF-8, tokens that render as "
            "nothing)."),
    Counter("cancelled_requests", "Requests cut mid-flight by the client itself (a stop, a drain timeout, "
            "Locust moving users to a joining worker): neither ok nor failed."),
    Counter("cancelled_output_tokens", "Completion tokens received by requests the client cut mid-flight."),
)
# Reasoning, speculative decoding (several tokens per chunk) and prefix caches, from each ok
# request's stream and usage (loadgen.stats.answer).
REQUESTS_OK = COUNTERS[0]
REASONING_REQUESTS = Counter("reasoning_requests", "Ok requests with reasoning tokens (R > 0).")
REASONING_TOKENS = Counter("reasoning_tokens", "Reasoning tokens of ok requests: usage.completion_tokens_details."
                           "reasoning_tokens, else counted from the stream's reasoning chunks.", "reasoning_tokens")
REASONING_COUNTED = Counter("reasoning_counted_requests", "Ok requests with reasoning whose reasoning tokens were "
                            "counted from the stream, or apportioned from the usage total (the server's usage had "
                            "no reasoning_tokens).")
OUTPUT_CHUNKS = Counter("output_chunks", "Content chunks (answer or reasoning text) of ok requests.",
                        "output_chunks")
OUTPUT_CHUNK_TOKENS = Counter("output_chunk_tokens", "Completion tokens of the ok requests that had content "
                              "chunks (textless ones left out).", "output_chunk_tokens")
CACHE_REPORTED_REQUESTS = Counter("cache_reported_requests", "Ok requests whose usage had prompt_tokens_details."
                                  "cached_tokens.")
CACHED_PROMPT_TOKENS = Counter("cached_prompt_tokens", "Prompt tokens the server served from its prefix cache: "
                               "usage.prompt_tokens_details.cached_tokens of ok requests.", "cached_prompt_tokens")
CACHE_REPORTED_PROMPT_TOKENS = Counter("cache_reported_prompt_tokens", "Prompt tokens of the ok requests whose "
                                       "usage had cached_tokens.", "cache_reported_prompt_tokens")
# SGLang leaves prompt_tokens_details out when nothing was cached (vLLM sends cached_tokens 0): kept
# apart, so whoever merges decides whether the stage saw the detail at all (cached_share)
CACHE_UNREPORTED_PROMPT_TOKENS = Counter("cache_unreported_prompt_tokens", "Prompt tokens of the ok requests "
                                         "whose usage had prompt_tokens but no cached_tokens.")
COUNTERS += (REASONING_REQUESTS, REASONING_TOKENS, REASONING_COUNTED, OUTPUT_CHUNKS, OUTPUT_CHUNK_TOKENS,
             CACHE_REPORTED_REQUESTS, CACHED_PROMPT_TOKENS, CACHE_REPORTED_PROMPT_TOKENS,
             CACHE_UNREPORTED_PROMPT_TOKENS)
# Counted by time, not by the request's stage: like window_output_tokens, these belong to the stage
# whose window was open when the event happened (loadgen.stats.inflight, loadgen.locust_face.open_loop).
WINDOW_REQUESTS = Counter("window_requests", "Ok requests that finished inside the window (whichever "
                          "stage sent them): the achieved rate is window_requests / window_s.")
COUNTERS += (
    WINDOW_REQUESTS,
    Counter("scheduled_requests", "Open-loop arrivals that came due (sent + dropped_by_client).",
            "scheduled_requests"),
    Counter("dropped_by_client", "Open-loop arrivals not sent because --max-inflight requests were "
            "already in flight (never delayed).", "dropped_by_client"),
    Counter("inflight_us", "Time integral of requests in flight over the window, request-microseconds: "
            "sum of n(t) dt; mean concurrency = inflight_us / 1e6 / window_s."),
    Counter("inflight_peak", "Most requests in flight at once in one process during the window.",
            peak=True),
)


@dataclass(frozen=True)
class SloCount:
    """A count of a stage's ``loadgen.slo.objectives.SloCounts`` (``attr`` names the field), shown as a goodput
    per second; ``exporter``: the Prometheus counter name of the run's total ("" = not exported)."""

    attr: str
    formula: str
    exporter: str = ""


@dataclass(frozen=True)
class Share:
    """A ratio 0-1: SloCounts ``of`` / SloCounts ``judged`` (requests given a verdict, ok + failed)."""

    of: SloCount


SLO_MET = SloCount("met", "Requests meeting every SLO objective (a failed request meets none).",
                   "slo_met_requests")
SLO_MET_TOKENS = SloCount("met_output_tokens", "Output tokens of requests meeting every SLO objective "
                          "(goodput in tokens).", "slo_met_output_tokens")
SLO_COUNTS = (SLO_MET, SLO_MET_TOKENS)


@dataclass(frozen=True)
class Ratio:
    """``num`` / (``den`` + ``den_also``), StageStats counters; None when that sum is 0."""

    num: Counter
    den: Counter
    den_also: Counter | None = None


@dataclass(frozen=True)
class DisplayUnit:
    """How people read a value: ``unit`` label and ``scale`` from the stored unit (s -> ms: 1000)."""

    unit: str
    scale: float = 1.0


MS = DisplayUnit("ms", 1000.0)
SECONDS = DisplayUnit("s")
TOK_S = DisplayUnit("tok/s")
REQ_S = DisplayUnit("req/s")
TOKENS = DisplayUnit("tokens")
PERCENT = DisplayUnit("%", 100.0)


@dataclass(frozen=True)
class Console:
    """A column of the console table: ``title`` over ``subtitle`` (default: the shown unit)."""

    title: str
    width: int
    subtitle: str | None = None
    slo: bool = False  # shown only in a run with SLO objectives


@dataclass(frozen=True)
class StageMetric:
    """One figure of a stage row. ``key`` names it in summary.json, stages.csv, the web UI and
    compare; ``unit`` is the stored value's; ``compare=True`` puts it in compare's text table."""

    key: str
    source: Histogram | Counter | SloCount | Share | Ratio
    q: float | None
    unit: str
    shown: DisplayUnit
    title: str
    console: Console | None = None
    compare: bool = False
    only_if: Counter | None = None  # None (not shown) while this counter is 0: no noise for plain models

    def value(self, stats, window_s: float | None) -> float | None:
        """From a loadgen.stats.stage_stats.StageStats: histogram quantile ``q``, counter / window_s, SLO goodput
        (output tok/s x count / measured output tokens), SLO share (count / judged requests) or a
        Ratio of counters; None while ``only_if`` is 0; a ``CostFigure`` needs the scenario's cost:
        None here, set by ``results.stage_row``."""
        if isinstance(self.source, CostFigure):
            return None
        if self.only_if is not None and not getattr(stats, self.only_if.attr):
            return None
        if isinstance(self.source, Ratio):
            also = self.source.den_also
            den = getattr(stats, self.source.den.attr) + (getattr(stats, also.attr) if also is not None else 0)
            return getattr(stats, self.source.num.attr) / den if den else None
        if isinstance(self.source, SloCount | Share):
            slo = stats.slo
            if not slo.judged:
                return None
            if isinstance(self.source, Share):
                return getattr(slo, self.source.of.attr) / slo.judged
            tokens_per_s = stats.window_output_tokens / window_s if window_s else None
            return goodput_per_s(getattr(slo, self.source.attr), tokens_per_s,
                                 stats.output_tokens + stats.failed_output_tokens)
        if isinstance(self.source, Counter):
            return getattr(stats, self.source.attr) / window_s if window_s else None
        hist = getattr(stats, self.source.attr)
        return hist.quantile(self.q) if hist.count else None

    def text(self, value: float | None) -> str:
        """A value of this metric as people read it, in the shown unit; "-" if missing."""
        return num(None if value is None else value * self.shown.scale)

    def cell(self, stage: dict) -> str:
        """This metric of a summary.json-form stage, as :meth:`text`."""
        return self.text(stage.get(self.key))


# SLO attainment of a stage (also the exporter's current-stage gauge).
SLO_ATTAINMENT = StageMetric("slo_attainment", Share(SLO_MET), None, "ratio", PERCENT, "SLO attainment (%)",
                             Console("SLO met", 8, "%", slo=True))

# The stage figures, in summary.json order. Percentiles of the ITL are per token (ITL_TOKEN).
STAGE_METRICS = (
    StageMetric("output_tokens_per_s", WINDOW_OUTPUT_TOKENS, None, "tok/s", TOK_S, "Output tok/s",
                Console("out tok/s", 10, "total"), compare=True),
    StageMetric("decode_tps_p50", DECODE_TPS, 0.5, "tok/s", TOK_S, "Req tok/s p50",
                Console("req tok/s", 10, "p50")),
    StageMetric("ttft_p50_s", TTFT, 0.5, "s", MS, "TTFT p50 (ms)", Console("TTFT p50", 9), compare=True),
    StageMetric("ttft_p90_s", TTFT, 0.9, "s", MS, "TTFT p90 (ms)", Console("p90", 7)),
    StageMetric("ttft_p95_s", TTFT, 0.95, "s", MS, "TTFT p95 (ms)"),
    StageMetric("ttft_p99_s", TTFT, 0.99, "s", MS, "TTFT p99 (ms)", Console("p99", 7)),
    StageMetric("itl_p50_s", ITL_TOKEN, 0.5, "s", MS, "ITL p50 (ms)", Console("ITL p50", 8), compare=True),
    StageMetric("itl_p90_s", ITL_TOKEN, 0.9, "s", MS, "ITL p90 (ms)", Console("p90", 6)),
    StageMetric("itl_p95_s", ITL_TOKEN, 0.95, "s", MS, "ITL p95 (ms)"),
    StageMetric("itl_p99_s", ITL_TOKEN, 0.99, "s", MS, "ITL p99 (ms)", Console("p99", 6)),
    StageMetric("itl_chunk_p50_s", ITL_CHUNK, 0.5, "s", MS, "Chunk gap p50 (ms)"),
    StageMetric("itl_chunk_p90_s", ITL_CHUNK, 0.9, "s", MS, "Chunk gap p90 (ms)"),
    StageMetric("itl_chunk_p99_s", ITL_CHUNK, 0.99, "s", MS, "Chunk gap p99 (ms)"),
    StageMetric("tpot_p50_s", TPOT, 0.5, "s", MS, "TPOT p50 (ms)", Console("TPOT p50", 9)),
    StageMetric("e2e_p50_s", E2E, 0.5, "s", SECONDS, "E2E p50 (s)", Console("E2E p50", 8)),
    StageMetric("e2e_p99_s", E2E, 0.99, "s", SECONDS, "E2E p99 (s)", Console("p99", 6)),
    # Reasoning (loadgen.stats.answer): None unless a request of the stage reasoned (plain models: no noise)
    StageMetric("ttfat_p50_s", TTFAT, 0.5, "s", MS, "Time to answer p50 (ms)", only_if=REASONING_REQUESTS),
    StageMetric("ttfat_p90_s", TTFAT, 0.9, "s", MS, "Time to answer p90 (ms)", only_if=REASONING_REQUESTS),
    StageMetric("ttfat_p99_s", TTFAT, 0.99, "s", MS, "Time to answer p99 (ms)", only_if=REASONING_REQUESTS),
    StageMetric("reasoning_tokens_per_request", Ratio(REASONING_TOKENS, REQUESTS_OK), None, "tokens", TOKENS,
                "Reasoning tokens/req", only_if=REASONING_REQUESTS),
    StageMetric("answer_decode_tps_p50", ANSWER_DECODE_TPS, 0.5, "tok/s", TOK_S, "Answer tok/s p50",
                only_if=REASONING_REQUESTS),
    # Speculative decoding or a stream interval: tokens per content chunk, output_chunk_tokens / output_chunks
    StageMetric("tokens_per_chunk", Ratio(OUTPUT_CHUNK_TOKENS, OUTPUT_CHUNKS), None, "tokens", TOKENS,
                "Output tokens per chunk"),
    # Prefix cache: cached / prompt tokens of the ok requests; once one request's usage had cached_tokens, a
    # request without it counts as 0 cached (SGLang omits a 0); None when none had it
    StageMetric("cached_share", Ratio(CACHED_PROMPT_TOKENS, CACHE_REPORTED_PROMPT_TOKENS,
                                      CACHE_UNREPORTED_PROMPT_TOKENS), None, "ratio", PERCENT, "Cached prompt (%)",
                only_if=CACHE_REPORTED_REQUESTS),
    StageMetric("achieved_rate_per_s", WINDOW_REQUESTS, None, "req/s", REQ_S, "Achieved req/s"),
    StageMetric("lateness_p99_s", LATENESS, 0.99, "s", MS, "Send lateness p99 (ms)"),
    StageMetric("input_len_p50_tokens", INPUT_LEN, 0.5, "tokens", TOKENS, "Input tokens p50"),
    StageMetric("input_len_p99_tokens", INPUT_LEN, 0.99, "tokens", TOKENS, "Input tokens p99"),
    StageMetric("output_len_p50_tokens", OUTPUT_LEN, 0.5, "tokens", TOKENS, "Output tokens p50"),
    StageMetric("output_len_p99_tokens", OUTPUT_LEN, 0.99, "tokens", TOKENS, "Output tokens p99"),
    # SLO figures (loadgen.slo.objectives): None when the scenario sets no objective; their console columns
    # appear only then (``Console.slo``)
    SLO_ATTAINMENT,
    StageMetric("goodput_requests_per_s", SLO_MET, None, "req/s", REQ_S, "Goodput (req/s)"),
    StageMetric("goodput_output_tokens_per_s", SLO_MET_TOKENS, None, "tok/s", TOK_S, "Goodput tok/s",
                Console("goodput", 9, "tok/s", slo=True)),
)


# --- cost and efficiency (loadgen.stats.cost): figures of the row and the scenario's cost section -------
@dataclass(frozen=True)
class CostFigure:
    """A stage figure computed from its row and the scenario's ``cost`` (``loadgen.stats.cost.stage_cost``,
    called by ``results.stage_row``); None without ``cost.gpus`` (and ``cost.gpu_hour_usd`` for $)."""

    formula: str


USD = DisplayUnit("$")
JOULE, KWH = DisplayUnit("J"), DisplayUnit("kWh")
COST_METRICS = (
    StageMetric("output_tokens_per_gpu_per_s", CostFigure("output tok/s / cost.gpus"), None, "tok/s",
                TOK_S, "Output tok/s per GPU"),
    StageMetric("total_tokens_per_gpu_per_s", CostFigure("(input tok/s + output tok/s) / cost.gpus; input "
                "tok/s = prompt tokens of the stage's ok requests / window_s"), None, "tok/s", TOK_S,
                "Total tok/s per GPU"),
    StageMetric("usd_per_million_output_tokens", CostFigure("cost.gpu_hour_usd x cost.gpus / (output tok/s x "
                "3600) x 1e6"), None, "$", USD, "$ per M output tok"),
    StageMetric("usd_per_million_total_tokens", CostFigure("cost.gpu_hour_usd x cost.gpus / (total tok/s x "
                "3600) x 1e6"), None, "$", USD, "$ per M total tok"),
    StageMetric("joules_per_output_token", CostFigure("gpu.energy_j / (output tok/s x window_s); gpu.energy_j: "
                "the DCGM energy counter's delta over the window, else mean power x window (--gpu-metrics)"),
                None, "J", JOULE, "J per output tok"),
    StageMetric("kwh_per_million_output_tokens", CostFigure("J per output token x 1e6 / 3.6e6"), None, "kWh", KWH,
                "kWh per M output tok"),
)
STAGE_METRICS += COST_METRICS


def num(value: float | None) -> str:
    """A number with about three significant digits and no exponent; "-" for missing."""
    if value is None:
        return "-"
    mag = abs(value)
    if mag >= 100 or value == 0:
        return f"{value:.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
