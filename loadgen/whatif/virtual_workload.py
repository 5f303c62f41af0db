"""What each virtual request asks for, and when open-loop requests arrive: the run's own draws.

Pure: no I/O, no clock; seeded. A ``VirtualWorkload`` is the part of a scenario that decides the
requests (``input:`` / ``output:``, ``workload.dataset``, ``prompt.seed``, ``rate.*``), and it draws
them with the run's code (``loadgen.workload``), seeded as the run seeds them:

- lengths: each sender has its own ``loadgen.workload.asks.sender_lengths`` (``LengthSampler``)
  keyed (prompt.seed, process 0, user number); a closed-loop user is numbered in the order it starts
  (as Locust creates them), the open-loop dispatcher is user 0. Every request draws one (input,
  output) pair, as ``Workload.next`` does, also when a dataset line then gives the lengths;
- dataset: one ``DatasetCursor`` over the whole file (in file order, or the run's seeded shuffle:
  ``loadgen.workload.dataset.share``), shared by every sender and cycling; a line's input is its
  ``input_tokens`` (or its token-ID prompt's length), its output ``line_output`` (the line's, else
  the draw's);
- open-loop arrivals: stage k's ``ArrivalSpec.for_stage(rate, arrival, burstiness, rate.seed, k)``
  from the stage's start; a timestamped dataset (a trace) arrives on its own
  ``loadgen.workload.trace.TraceSchedule``; an arrival due while ``max_inflight`` requests are in
  flight is dropped (``dropped_by_client``), never delayed, as the run's dispatcher does.

- models: with a mix of models (``model: {a: 0.7, b: 0.3}``), each request's model drawn by its
  sender's ``loadgen.workload.model_mix.ModelDraw`` keyed as its lengths are; the engine model times
  every model alike (one engine serving them, as base model and LoRA adapters share one).

Replicas (``part`` of ``parts``): each replica's sender draws on its own streams (user numbers
``part + parts x u``, ``ArrivalSpec.for_part``, every parts-th dataset line), so replicas do not
play copies of one workload.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.errors import ConfigError
from loadgen.workload.arrivals import ArrivalSpec
from loadgen.workload.asks import DatasetCursor, line_output, sender_lengths
from loadgen.workload.dataset import DatasetRequest, share
from loadgen.workload.lengths import LengthDist, LengthSampler
from loadgen.workload.mix import KvMix, known_input, workload_mix
from loadgen.workload.model_mix import ModelDraw, ModelMix
from loadgen.workload.trace import TraceSchedule, is_trace


@dataclass(frozen=True)
class VirtualWorkload:
    """The requests of a what-if (module docstring). The default: 1000 in, 1000 out, constant gaps."""

    inputs: LengthDist = LengthDist("fixed", 1000)
    outputs: LengthDist = LengthDist("fixed", 1000)
    prompt_seed: int = 0  # prompt.seed: lengths and the dataset's shuffle
    dataset: tuple[DatasetRequest, ...] = ()
    dataset_path: str | None = None
    shuffled: bool = False  # workload.dataset_order shuffled
    arrival: str = "constant"  # rate.arrival: poisson | constant | gamma
    burstiness: float = 1.0
    rate_seed: int = 0  # rate.seed
    trace_speedup: float = 1.0
    max_inflight: int | None = None  # rate.max_inflight: an arrival due beyond it is dropped; None: no cap
    model_mix: ModelMix | None = None  # a mix of models: each request draws one, as the run's senders do

    def __post_init__(self) -> None:
        text = [r.line for r in self.dataset if known_input(r) == 0]
        if text:
            raise ConfigError("workload.dataset", self.dataset_path, f"line {text[0]} (and {len(text) - 1} more) "
                              "gives a text prompt: its length in tokens is known only to the server",
                              "give the what-if lines with input_tokens (or token-ID prompts)")

    @classmethod
    def fixed(cls, input_tokens: int, output_tokens: int) -> VirtualWorkload:
        return cls(LengthDist("fixed", input_tokens), LengthDist("fixed", output_tokens))

    @property
    def trace(self) -> bool:
        return is_trace(list(self.dataset[:1]))

    @property
    def varied(self) -> bool:
        """Requests differ from one another (not two fixed lengths)."""
        return bool(self.dataset) or self.inputs.kind != "fixed" or self.outputs.kind != "fixed"

    def mix(self) -> KvMix:
        """The KV guard's figure per request for this workload (``loadgen.workload.mix``)."""
        return workload_mix(self.inputs, self.outputs, list(self.dataset) or None)

    def describe(self) -> str:
        if self.dataset:
            order = "trace" if self.trace else ("shuffled" if self.shuffled else "in order")
            return f"dataset {self.dataset_path} ({len(self.dataset):,} lines, {order})"
        if not self.varied:
            return f"{self.inputs.value} in / {self.outputs.value} out"
        return f"input {self.inputs.describe()} / output {self.outputs.describe()}"

    def cursor(self, part: int, parts: int) -> DatasetCursor | None:
        if not self.dataset or self.trace:
            return None
        return DatasetCursor(share(list(self.dataset), part, parts, self.shuffled, self.prompt_seed))

    def sender(self, user: int, cursor: DatasetCursor | None, part: int = 0, parts: int = 1) -> Sender:
        key = (self.prompt_seed, 0, part + parts * user)
        models = ModelDraw(self.model_mix, key) if self.model_mix is not None else None
        return Sender(sender_lengths(self.inputs, self.outputs, key), cursor, models)

    def arrivals(self, rate_per_s: float, stage: int, part: int = 0, parts: int = 1):
        """Stage ``stage``'s schedule (``next_due_s()``, seconds from the stage's start) of replica
        ``part``, for the stage's total rate; a trace: ``TraceSchedule`` (``next()`` -> (due, line))."""
        if self.trace:
            return TraceSchedule(list(self.dataset), part, parts, self.trace_speedup)
        spec = ArrivalSpec.for_stage(rate_per_s * parts, self.arrival, self.burstiness, self.rate_seed, stage)
        return spec.for_part(part, parts)


class Sender:
    """One virtual sender's requests: (input, output) tokens, as ``loadgen.workload.asks.Workload``
    hands out its Asks (one length draw per request; a dataset line's lengths where it has them)."""

    def __init__(self, lengths: LengthSampler, cursor: DatasetCursor | None, models: ModelDraw | None = None):
        self.lengths, self.cursor, self.models = lengths, cursor, models

    def model(self) -> str | None:
        """The next request's model: its draw from the mix (``ModelDraw``, keyed as the run's
        sender), None without a mix."""
        return self.models.next() if self.models is not None else None

    def next(self) -> tuple[int, int]:
        n_in, n_out = self.lengths.next()
        if self.cursor is None:
            return n_in, n_out
        return self.line(self.cursor.next(), n_out)

    def line(self, r: DatasetRequest, default_output: int | None = None) -> tuple[int, int]:
        return known_input(r), line_output(r, default_output, self.lengths)
