"""Per-stage request statistics: counters + LogHistograms, mergeable across processes. No I/O.

``StageStats`` sums RequestResults (formulas of the per-request metrics: loadgen.stats.records).
``Collector`` is one process's set of them: ``totals`` (every request) and ``stages[k]`` (requests
sent while stage k was measured). Workers ship ``take_delta()`` to the master, which
``merge_delta``s them; counts are integers and histogram buckets add, so the merged statistics are
exactly those of one collector that saw every sample (float sums up to rounding).
"""

from __future__ import annotations

import math

from loadgen.slo.objectives import Objectives, SloCounts, request_verdict
from loadgen.stats import metrics
from loadgen.stats.answer import STREAM, USAGE
from loadgen.stats.failures import FailureSamples
from loadgen.stats.hist import BUCKETS_PER_DECADE, EDGES, Binned, LogHistogram, bin_values

HISTOGRAMS = tuple(h.attr for h in metrics.HISTOGRAMS)  # attribute names, declared in loadgen.stats.metrics
COUNTERS = tuple(c.attr for c in metrics.COUNTERS)
PEAKS = frozenset(c.attr for c in metrics.COUNTERS if c.peak)  # merged by max, not sum
# A model's row of a stage with a mix of models (StageStats.model_row): what each model got
# A stage's requests split by a part of the load, each part counted in full: by model, by replica
PART_TABLES = ("models", "replicas")
MODEL_FIELDS = ("requests", "error_count", "errors", "input_tokens", "output_tokens", "output_tokens_per_s",
                "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p99_s")


class StageStats:
    """Statistics of one stage (or of the whole run).

    Counters and histograms are those of ``loadgen.stats.metrics.COUNTERS`` / ``HISTOGRAMS`` (what each
    counts is stated there), plus ``errors`` {failure kind: requests} and ``failures`` (the server's
    reasons: the first distinct HTTP status + message excerpts per kind, loadgen.stats.failures). Histograms hold ok requests
    only: ``ttft_s``, ``e2e_s``, ``tpot_s``, ``decode_tps`` one sample per request, ``itl_token_s``
    one per token, ``itl_chunk_s`` one per chunk gap. ``slo``: the SLO counts (``loadgen.slo.objectives``) of
    every request given a verdict, ok or failed (empty when the scenario sets no objective).
    """

    __slots__ = (*COUNTERS, "errors", "failures", "ttft_by_turn", *HISTOGRAMS, "slo")

    def __init__(self) -> None:
        for name in COUNTERS:
            setattr(self, name, 0)
        self.errors: dict[str, int] = {}
        self.failures = FailureSamples()
        self.ttft_by_turn: dict[int, LogHistogram] = {}  # multi-turn (loadgen.workload.conversation): turn -> TTFT
        for name in HISTOGRAMS:
            setattr(self, name, LogHistogram())
        self.slo = SloCounts()

    def add_result(self, result, expected_in: int | None, expected_out: int | None, itl=None,
                   turn: int | None = None, verdict: tuple[bool, tuple[str, ...]] | None = None) -> None:
        """Count one finished request (a loadgen.stats.records.RequestResult); ``turn``: its 0-based turn
        in a multi-turn conversation (None: single requests), for ``ttft_by_turn``.

        ``itl``: ``bin_itl(result)`` when the caller adds the same result to several StageStats;
        ``verdict``: its ``loadgen.slo.objectives.request_verdict`` (None: no objective set).
        """
        if verdict is not None:
            self.slo.count(result, verdict)
        if not result.ok:
            self.errors[result.error_kind] = self.errors.get(result.error_kind, 0) + 1
            self.failed_output_tokens += result.completion_tokens
            self.failures.add(result.error_kind, result.error_status, result.error_message)
            return
        self.requests_ok += 1
        if not result.chunks:
            self.textless_requests += 1
        pt = result.prompt_tokens
        if pt is not None or expected_in:
            self.input_len_tokens.add(pt if pt is not None else expected_in)
        if result.completion_tokens:
            self.output_len_tokens.add(result.completion_tokens)
        if pt is None:
            self.input_tokens += expected_in or 0
        else:
            self.input_tokens += pt
            if expected_in is not None and pt != expected_in:
                self.mismatch_input += 1
        self.output_tokens += result.completion_tokens
        if result.tokens_estimated:  # chunk counts are not token counts: no mismatch verdict
            self.tokens_estimated += 1
        elif expected_out is not None and result.completion_tokens != expected_out:
            self.mismatch_output += 1
        if result.ttft_s is not None:
            self.ttft_s.add(result.ttft_s)
            if turn is not None:
                self.ttft_by_turn.setdefault(turn, LogHistogram()).add(result.ttft_s)
        self.e2e_s.add(result.e2e_s)
        if result.tpot_s is not None:
            self.tpot_s.add(result.tpot_s)
        if result.decode_tps is not None:
            self.decode_tps.add(result.decode_tps)
        self._add_answer(result)
        chunk, token = itl if itl is not None else bin_itl(result)
        if chunk is not None:
            self.itl_chunk_s.add_binned(chunk)
        if token is not None:
            self.itl_token_s.add_binned(token)

    def _add_answer(self, result) -> None:
        """Reasoning, chunks and cached prompt tokens of an ok result (loadgen.stats.answer)."""
        if result.ttfat_s is not None:
            self.ttfat_s.add(result.ttfat_s)
        if result.answer_decode_tps is not None:
            self.answer_decode_tps.add(result.answer_decode_tps)
        if result.reasoning_tokens:
            self.reasoning_requests += 1
            self.reasoning_tokens += result.reasoning_tokens
            if result.reasoning_source != USAGE:  # stream or apportioned: not the server's count
                self.reasoning_counted_requests += 1
        if result.chunks:
            self.output_chunks += result.chunks
            self.output_chunk_tokens += result.completion_tokens
        if result.prompt_tokens is None:
            return
        if result.cached_prompt_tokens is not None:
            self.cache_reported_requests += 1
            self.cached_prompt_tokens += result.cached_prompt_tokens
            self.cache_reported_prompt_tokens += result.prompt_tokens
        else:  # 0 cached if another request of the stage had the detail (SGLang omits a 0): cached_share
            self.cache_unreported_prompt_tokens += result.prompt_tokens

    @property
    def error_count(self) -> int:
        """Failed requests of every kind, overload (429/503) included."""
        return sum(self.errors.values())

    def merge(self, other: StageStats) -> None:
        """Add everything ``other`` counted."""
        for name in COUNTERS:
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, max(mine, theirs) if name in PEAKS else mine + theirs)
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.failures.merge(other.failures)
        for turn, h in other.ttft_by_turn.items():
            self.ttft_by_turn.setdefault(turn, LogHistogram()).merge(h)
        for name in HISTOGRAMS:
            getattr(self, name).merge(getattr(other, name))
        self.slo.merge(other.slo)

    def is_empty(self) -> bool:
        # every histogram sample comes with a counter: requests_ok += 1 (results) or
        # scheduled_requests += 1 (lateness), so counters and errors tell it all
        return not self.errors and not any(getattr(self, n) for n in COUNTERS)

    def to_message(self) -> dict:
        """Sparse JSON/msgpack-safe form: non-zero counters, errors, non-empty histograms, the
        server's failure reasons, SLO counts."""
        wire = {
            "c": {n: getattr(self, n) for n in COUNTERS if getattr(self, n)},
            "e": dict(self.errors),
            "h": {n: getattr(self, n).to_message() for n in HISTOGRAMS if getattr(self, n).count},
        }
        if not self.failures.is_empty():
            wire["f"] = self.failures.to_message()
        if self.ttft_by_turn:
            wire["t"] = {str(k): h.to_message() for k, h in self.ttft_by_turn.items()}
        if not self.slo.is_empty():
            wire["s"] = self.slo.to_message()
        return wire

    @classmethod
    def from_message(cls, d: dict) -> StageStats:
        s = cls()
        for name, v in d.get("c", {}).items():
            if name not in COUNTERS:
                raise ValueError(f"unknown StageStats counter {name!r} in wire data")
            setattr(s, name, int(v))
        s.errors = {str(k): int(v) for k, v in d.get("e", {}).items()}
        if "f" in d:
            s.failures = FailureSamples.from_message(d["f"])
        s.ttft_by_turn = {int(k): LogHistogram.from_message(h) for k, h in d.get("t", {}).items()}
        for name, h in d.get("h", {}).items():
            if name not in HISTOGRAMS:
                raise ValueError(f"unknown StageStats histogram {name!r} in wire data")
            setattr(s, name, LogHistogram.from_message(h))
        if "s" in d:
            s.slo = SloCounts.from_message(d["s"])
        return s

    def row(self, window_s: float | None) -> dict:
        """The summary.json stage fields derivable from these statistics.

        ``requests`` = ok requests; ``error_count`` = failed requests (all kinds, overload too);
        then every ``loadgen.stats.metrics.STAGE_METRICS`` value (e.g. ``output_tokens_per_s`` =
        window_output_tokens / window_s, None without a window; quantiles None when empty).
        """
        return {
            "requests": self.requests_ok,
            "errors": dict(sorted(self.errors.items())),
            "error_count": self.error_count,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            **{m.key: m.value(self, window_s) for m in metrics.STAGE_METRICS},
            "token_mismatch": {
                "input": self.mismatch_input,
                "output": self.mismatch_output,
                "estimated": self.tokens_estimated,
            },
            "textless_requests": self.textless_requests,
            **self._answer_fields(),
            "failures": self.failures.to_summary(),
            **self._by_turn(),
            **self._length_hist(),
        }

    def model_row(self, window_s: float | None, keys: tuple[str, ...] = MODEL_FIELDS) -> dict:
        """One model's figures of a stage with a mix of models: the ``MODEL_FIELDS`` of ``row``
        (same formulas; the models' counts add up to the stage's exactly, their tok/s up to rounding).
        ``keys``: other fields of ``row`` instead (a replica's, loadgen.stats.replicas)."""
        row = self.row(window_s)
        return {key: row[key] for key in keys}

    def _answer_fields(self) -> dict:
        """``cached_prompt_tokens`` (None when no request's usage said) and, for a stage with
        reasoning, ``reasoning_tokens`` and where they came from (``reasoning_tokens_source``:
        usage, stream, or mixed: some requests each way)."""
        fields: dict = {"cached_prompt_tokens": self.cached_prompt_tokens if self.cache_reported_requests else None}
        if self.reasoning_requests:
            counted = self.reasoning_counted_requests
            fields["reasoning_tokens"] = self.reasoning_tokens
            fields["reasoning_tokens_source"] = (
                USAGE if not counted else STREAM if counted == self.reasoning_requests else "mixed")
        return fields

    def _length_hist(self) -> dict:
        """``length_hist``: requests per bin of input and output tokens, counts[i] = requests with
        edges[i-1] < tokens <= edges[i] (counts[0]: <= edges[0] = 1), edges 10^(k/10) (10 bins per
        decade, on the LogHistogram's own bucket edges, so the counts are exact) up to the
        largest length seen: the workload actually sent, drawn by report.html."""
        hi = max(self.input_len_tokens.max or 0, self.output_len_tokens.max or 0)
        if not hi:
            return {}
        top = max(1, math.ceil(10 * math.log10(hi) - 1e-9))
        one = 6 * BUCKETS_PER_DECADE  # EDGES[one] == 1.0 (loadgen.stats.hist: 1e-6 .. 1e6)
        edges = [float(EDGES[one + BUCKETS_PER_DECADE // 10 * k]) for k in range(top + 1)]

        def counts(h: LogHistogram) -> list[int]:
            cum = h.cumulative_le(edges)
            return [cum[0]] + [b - a for a, b in zip(cum, cum[1:], strict=False)]

        return {"length_hist": {"edges": [round(e, 6) for e in edges], "input": counts(self.input_len_tokens),
                                "output": counts(self.output_len_tokens)}}

    def _by_turn(self) -> dict:
        """Multi-turn runs only: ``ttft_p50_s_by_turn`` [turn 0, 1, ...] (None for a turn with no
        sample) and ``requests_by_turn``, so a reader sees the prefix cache's effect per turn."""
        if not self.ttft_by_turn:
            return {}
        turns = range(max(self.ttft_by_turn) + 1)
        hists = [self.ttft_by_turn.get(t) for t in turns]
        return {"ttft_p50_s_by_turn": [h.quantile(0.5) if h and h.count else None for h in hists],
                "requests_by_turn": [h.count if h else 0 for h in hists]}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StageStats):
            return NotImplemented
        return (
            all(getattr(self, n) == getattr(other, n) for n in COUNTERS)
            and self.errors == other.errors
            and self.failures == other.failures
            and all(getattr(self, n) == getattr(other, n) for n in HISTOGRAMS)
            and self.ttft_by_turn == other.ttft_by_turn
            and self.slo == other.slo
        )

    __hash__ = None  # mutable


def bin_itl(result) -> tuple[Binned | None, Binned | None]:
    """Per-chunk and per-token ITL samples of an ok result, binned once.

    Binning is most of the cost of a 1000-token result, so it is shared: between the totals and
    the stage, and between both histograms when records hands over the same array for both (one
    token per chunk, all weights 1).
    """
    if not result.ok or not len(result.itl_chunk_s):
        return None, None
    chunk = bin_values(result.itl_chunk_s)
    if result.itl_token_s is result.itl_chunk_s:
        return chunk, chunk
    return chunk, bin_values(result.itl_token_s, result.itl_token_w)


class Collector:
    """One process's request statistics.

    ``totals``: every request (for the exporter); ``stages[k]``: requests sent while stage k was
    measured; ``inflight[stage]``: requests started and not finished (stage None = not measured).
    A local run and the master keep everything here for the whole run (only ever added to). On a
    worker, ``take_delta()`` hands what was added since the previous call to the master and
    starts ``totals`` and ``stages`` afresh. ``inflight`` is this process's own absolute count; a
    worker reports it whole (``Runtime.report``), so the master can drop a lost worker's share.

    Time slices (``stages.slice_s``, docs/soak.md): ``slice`` is the (stage, slice index) being
    measured now (set by the Runtime's slice clock, None between windows); what a stage gets while
    its slice is open also goes to ``slices[(stage, j)]``: a request completed in it, tokens that
    arrived in it, its in-flight time. They ship and merge like ``stages``; the owner pops a slice
    once it has closed (``pop_slice``), so a days-long stage holds only its open slices.

    ``models[k][name]``: with a mix of models (loadgen.workload.model_mix), stage k's requests
    that asked for model ``name``, counted by the same ``StageStats`` code as the stage, so the
    models' requests, errors, output tokens and window tokens add up to the stage's exactly
    (callers pass ``model`` only with a mix; a single model keeps no per-model statistics). The
    in-flight integral and open-loop scheduling (arrivals, drops, lateness) are per stage only.

    ``replicas[k][name]``: with several replicas (loadgen.wire.replicas), stage k's requests by the
    replica that served them, kept exactly as ``models`` (callers pass ``replica`` only then).
    """

    def __init__(self) -> None:
        self.totals = StageStats()
        self.stages: dict[int, StageStats] = {}
        self.models: dict[int, dict[str, StageStats]] = {}
        self.replicas: dict[int, dict[str, StageStats]] = {}
        self.inflight: dict[int | None, int] = {}
        self.slice: tuple[int, int] | None = None
        self.slices: dict[tuple[int, int], StageStats] = {}

    def _slice(self, stage: int | None) -> StageStats | None:
        """The open slice's statistics when ``stage`` is the stage it slices, else None."""
        key = self.slice
        if key is None or stage != key[0]:
            return None
        s = self.slices.get(key)
        if s is None:
            s = self.slices[key] = StageStats()
        return s

    def pop_slice(self, stage: int, index: int) -> StageStats:
        """The owner: slice ``index`` of ``stage`` has closed; its statistics (empty if none came)."""
        return self.slices.pop((stage, index), None) or StageStats()

    def _stage(self, stage: int) -> StageStats:
        s = self.stages.get(stage)
        if s is None:
            s = self.stages[stage] = StageStats()
        return s

    @staticmethod
    def _part(table: dict[int, dict[str, StageStats]], stage: int, name: str) -> StageStats:
        """Stage ``stage``'s StageStats of ``name`` in ``table`` (``models`` or ``replicas``)."""
        by_name = table.setdefault(stage, {})
        s = by_name.get(name)
        if s is None:
            s = by_name[name] = StageStats()
        return s

    def _measured(self, stage: int | None, model: str | None, replica: str | None = None) -> tuple[StageStats, ...]:
        """The StageStats a measured event of ``stage`` counts in: the stage's, ``model``'s (given
        with a mix), ``replica``'s (given with several replicas) and the open slice's when it
        slices this stage."""
        if stage is None:
            return ()
        found = [self._stage(stage)]
        if model is not None:
            found.append(self._part(self.models, stage, model))
        if replica is not None:
            found.append(self._part(self.replicas, stage, replica))
        if (piece := self._slice(stage)) is not None:
            found.append(piece)
        return tuple(found)

    def record_result(
        self, result, stage: int | None, expected_in: int | None, expected_out: int | None,
        objectives: Objectives | None = None, turn: int | None = None, model: str | None = None,
        replica: str | None = None,
    ) -> None:
        """Count a finished request in the totals and, if it was measured, in its stage (and its
        model's, ``model`` given with a mix). With ``objectives`` set, its SLO verdict is computed
        here, once, and counted in each."""
        verdict = request_verdict(result, objectives) if objectives is not None and objectives.enabled else None
        if stage is None:
            self.totals.add_result(result, expected_in, expected_out, turn=turn, verdict=verdict)
            return
        itl = bin_itl(result)
        self.totals.add_result(result, expected_in, expected_out, itl, turn, verdict)
        for s in self._measured(stage, model, replica):
            s.add_result(result, expected_in, expected_out, itl, turn, verdict)

    def add_window_tokens(self, stage: int | None, n: int, model: str | None = None,
                          replica: str | None = None) -> None:
        """Tokens that just arrived: totals always, stage ``stage`` (and ``model``'s, ``replica``'s)
        if it is being measured."""
        self.totals.window_output_tokens += n
        for s in self._measured(stage, model, replica):
            s.window_output_tokens += n

    def request_scheduled(self, stage: int | None, lateness_s: float | None) -> None:
        """An open-loop arrival came due: sent ``lateness_s`` after its scheduled time, or dropped
        (``None``: --max-inflight requests were in flight)."""
        for s in (self.totals, None if stage is None else self._stage(stage), self._slice(stage)):
            if s is None:
                continue
            s.scheduled_requests += 1
            if lateness_s is None:
                s.dropped_by_client += 1
            else:
                s.schedule_lateness_s.add(max(lateness_s, 1e-6))  # the first bucket holds "on time"

    def add_window_request(self, stage: int | None, model: str | None = None, replica: str | None = None) -> None:
        """An ok request finished now: totals always, stage ``stage`` (and ``model``'s, ``replica``'s)
        if it is being measured."""
        self.totals.window_requests += 1
        for s in self._measured(stage, model, replica):
            s.window_requests += 1

    def add_inflight(self, stage: int, request_us: int, inflight: int) -> None:
        """Stage ``stage``'s in-flight integral grows by ``request_us``; ``inflight`` are in flight
        now (loadgen.stats.inflight.InflightMeter)."""
        for s in (self._stage(stage), self._slice(stage)):
            if s is None:
                continue
            s.inflight_us += request_us
            if inflight > s.inflight_peak:
                s.inflight_peak = inflight

    def request_started(self, stage: int | None) -> None:
        self.inflight[stage] = self.inflight.get(stage, 0) + 1

    def request_finished(self, stage: int | None) -> None:
        self.inflight[stage] = self.inflight.get(stage, 0) - 1

    def record_cancelled(self, stage: int | None, tokens: int, model: str | None = None,
                         replica: str | None = None) -> None:
        """A request this process cut mid-flight (its user was stopped) after ``tokens`` arrived:
        counted in the totals, its stage (its model's, its replica's, its open slice's), and shipped
        to the master like every other count."""
        for s in (self.totals, *self._measured(stage, model, replica)):
            s.cancelled_requests += 1
            s.cancelled_output_tokens += tokens

    def take_delta(self) -> dict:
        """Everything added since the previous call (msgpack/JSON-safe); resets totals and stages.

        Stages are a list of ``[stage, wire]`` pairs so integer stage keys survive both JSON and
        msgpack unchanged; with a mix, ``models`` is a list of ``[stage, {model: wire}]``, with
        several replicas ``replicas`` likewise.
        """
        delta = {
            "totals": self.totals.to_message(),
            "stages": [[k, s.to_message()] for k, s in self.stages.items() if not s.is_empty()],
        }
        if self.slices:  # [stage, slice index, wire]; absent without slices (older masters ignore it)
            delta["slices"] = [[k, j, s.to_message()] for (k, j), s in self.slices.items() if not s.is_empty()]
        for key in PART_TABLES:
            parts = [[k, {name: s.to_message() for name, s in by_name.items() if not s.is_empty()}]
                     for k, by_name in getattr(self, key).items()]
            if any(by_name for _, by_name in parts):
                delta[key] = [[k, by_name] for k, by_name in parts if by_name]
            setattr(self, key, {})
        self.totals = StageStats()
        self.stages = {}
        self.slices = {}
        return delta

    def merge_delta(self, delta: dict) -> None:
        """Master: add one worker's ``take_delta()``."""
        self.totals.merge(StageStats.from_message(delta["totals"]))
        for k, wire in delta["stages"]:
            self._stage(int(k)).merge(StageStats.from_message(wire))
        for k, j, wire in delta.get("slices", ()):
            self.slices.setdefault((int(k), int(j)), StageStats()).merge(StageStats.from_message(wire))
        for key in PART_TABLES:
            for k, by_name in delta.get(key, ()):
                for name, wire in by_name.items():
                    self._part(getattr(self, key), int(k), str(name)).merge(StageStats.from_message(wire))
