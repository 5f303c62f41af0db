"""Predicted requests and stage rows, accounted as a run accounts its own.

Pure. A simulated request (``Timing``: sent, each chunk's arrival and tokens) becomes a
``loadgen.stats.records.RequestResult`` (``Timing.result``: the client's formulas, stated there),
counted as it finishes in its stage's ``loadgen.stats.stage_stats.StageStats`` with its SLO verdict
(``loadgen.slo.objectives.request_verdict``), exactly as the run's collector counts a real one; a stage's
row is the run's own ``loadgen.run.results.stage_row`` of those statistics, plus ``predicted: true``
and the flag ``predicted``. What the virtual run knows and a client cannot is the server's: its
``server`` object holds the engine's preemptions and peak batch, queue and KV use over the window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loadgen.errors import HTTP_4XX, OVERLOAD_503
from loadgen.run.results import GuardLog, StageInfo
from loadgen.run.results import stage_row as run_stage_row
from loadgen.slo.early import EarlyVerdict
from loadgen.slo.objectives import Objectives
from loadgen.stats.records import RequestResult
from loadgen.stats.stage_stats import StageStats

PREDICTED_FLAG = "predicted"


@dataclass
class Timing:
    """One request as the client sees it: sent, and each chunk's arrival and tokens."""

    sent_s: float
    stage: int | None  # the stage whose window it was sent in; None: unmeasured
    chunk_t: list[float] = field(default_factory=list)
    chunk_n: list[int] = field(default_factory=list)
    done: bool = False
    rejected: bool = False  # max_queued: refused (a 503)
    input_tokens: int = 0  # the prompt's tokens, as asked
    too_long: bool = False  # input + output above max_model_len: refused (a 400)
    output_tokens: int = 0  # the output's tokens, as asked
    model: str | None = None  # with a mix of models: the one its sender drew (None: no mix)

    @property
    def failed(self) -> bool:
        return self.rejected or self.too_long

    @property
    def tokens(self) -> int:
        return sum(self.chunk_n)

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_t[0] - self.sent_s if self.chunk_t else None

    @property
    def e2e_s(self) -> float | None:
        return self.chunk_t[-1] - self.sent_s if self.chunk_t else None

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (N - 1), None when N < 2 (``loadgen.stats.records``)."""
        n = self.tokens
        return (self.chunk_t[-1] - self.chunk_t[0]) / (n - 1) if n >= 2 else None

    def result(self) -> RequestResult:
        """The request as ``loadgen.stats.records.RequestRecord.finish`` reports it: usage is the
        server's (prompt and completion tokens exact); TTFT = t(first chunk) - t(sent), E2E =
        t(last chunk) - t(sent), TPOT = (E2E - TTFT) / (N - 1), decode rate its inverse; per-chunk
        ITL gap_i = t(chunk i) - t(chunk i-1), per-token ITL gap_i / n_i weighted by n_i (the same
        array when every chunk holds one token); no reasoning, so TTFAT = TTFT. A refusal (503 queue
        full, 400 too long) fails at once."""
        if self.failed or not self.chunk_t:
            kind, status = (OVERLOAD_503, 503) if self.rejected else (HTTP_4XX, 400)
            empty = np.empty(0)
            return RequestResult(False, kind, "refused by the simulated server", self.input_tokens, 0, False,
                                 None, 0.0, None, None, empty, empty, empty, None, 0, status)
        n, ttft, e2e, tpot = self.tokens, self.ttft_s, self.e2e_s, self.tpot_s
        gaps = np.diff(np.asarray(self.chunk_t))
        per = np.asarray(self.chunk_n[1:], dtype=np.int64)
        token_s, token_w = (gaps, np.ones(len(gaps))) if (per == 1).all() else (gaps / np.maximum(per, 1), per)
        decode = 1.0 / tpot if tpot else None
        return RequestResult(True, None, "", self.input_tokens, n, False, ttft, e2e, tpot, decode, token_s,
                             token_w, gaps, "length", len(self.chunk_t), ttfat_s=ttft, answer_decode_tps=decode)


@dataclass
class ModelPart:
    """One model's share of a virtual stage with a mix of models, counted as the stage is (the run's
    per-model ``StageStats``: loadgen.stats.stage_stats.Collector ``models``)."""

    window_tokens: int = 0
    window_finished: int = 0
    stats: StageStats = field(default_factory=StageStats)

    def window_counts(self) -> StageStats:
        self.stats.window_output_tokens, self.stats.window_requests = self.window_tokens, self.window_finished
        return self.stats


@dataclass
class VirtualStage:
    """What the virtual run saw of one stage: its load, window, measured requests and their
    statistics (``stats``: as the run's collector counts them)."""

    index: int
    concurrency: int | None
    rate_per_s: float | None
    window_start_s: float = 0.0
    window_s: float = 0.0
    window_tokens: int = 0  # output tokens whose chunk arrived in the window
    window_finished: int = 0  # requests (measured or not) that finished ok in the window
    requests: list[Timing] = field(default_factory=list)
    preemptions: int = 0
    warmup_capped: bool = False  # the plan opened the window at max_warmup_s, before the turnover
    peak_running: int = 0
    peak_waiting: int = 0
    peak_kv_tokens: int = 0
    scheduled: int = 0  # open loop: arrivals that came due in the window (sent + dropped)
    dropped: int = 0  # open loop: arrivals not sent, rate.max_inflight requests already in flight
    search: bool = False  # an SLO search stage (the plan's PhaseStarted.search)
    early: EarlyVerdict | None = None  # the window closed early on this SLO verdict (slo.early_stop)
    stats: StageStats = field(default_factory=StageStats)
    models: dict[str, ModelPart] = field(default_factory=dict)  # with a mix of models: each one's part

    def model(self, name: str) -> ModelPart:
        return self.models.setdefault(name, ModelPart())

    def window_counts(self) -> StageStats:
        """``stats`` with the window's counters the client keeps as they happen (tokens arrived,
        ok requests finished, arrivals scheduled and dropped in the window)."""
        st = self.stats
        st.window_output_tokens, st.window_requests = self.window_tokens, self.window_finished
        st.scheduled_requests, st.dropped_by_client = self.scheduled, self.dropped
        return st


def stage_row(rec: VirtualStage, kv_tokens: int, objectives: Objectives | None = None,
              mix_names: tuple[str, ...] = ()) -> dict:
    """The predicted summary.json row of one virtual stage: the run's ``stage_row`` of its
    statistics (SLO, search and early-stop fields and flags included; with a mix of models,
    ``mix_names``, each model's row), marked predicted."""
    info = StageInfo(rec.index, rec.concurrency, window_s=rec.window_s, users=rec.concurrency,
                     server={"preemptions": rec.preemptions, "waiting_max": rec.peak_waiting,
                             "running_max": rec.peak_running,
                             "kv_usage_max": rec.peak_kv_tokens / kv_tokens if kv_tokens else None},
                     search=rec.search, rate_per_s=rec.rate_per_s, early=rec.early,
                     flags=["warmup_capped"] if rec.warmup_capped else [])
    unfinished = sum(1 for t in rec.requests if not t.done)  # still running when the prediction stopped
    models = {name: part.window_counts() for name, part in rec.models.items()}
    row = run_stage_row(info, rec.window_counts(), GuardLog(), {}, False, unfinished or None,
                        objectives=objectives, models=models, mix_names=mix_names)
    row["predicted"] = True
    row["flags"].insert(0, PREDICTED_FLAG)
    return row
