"""The KV guard's per-request figure for a mix of lengths. Pure: no I/O, no clock; seeded.

A request holds input + output tokens of KV cache at its last token; in a K-turn conversation the
last turn holds the whole history, sum over the K turns of (input + output) (the longest history;
loadgen.workload.conversation). ``KvMix`` is the distribution of that figure T per request: its mean mu,
standard deviation sigma, and the longest request (None: unbounded).

Which figure the guard uses, and why: C requests in flight hold T_1 + ... + T_C. In the steady
state that sum is C x mu; in a burst (the C in flight happen to be the long ones) it is higher.
By the central limit theorem the sum's 99th percentile is about C x mu + z x sqrt(C) x sigma
(z = 2.326), so the guard projects

    per_request(C) = min(mu + z x sigma / sqrt(C), longest)

tokens per request, x C. At C = 1 that is about the request's own p99 (one long request is the
burst); as C grows it tends to the mean (many requests average out), so a mix is neither refused
for its rare long requests at high concurrency nor let through at low concurrency where one long
request alone overflows. Fixed lengths: sigma = 0, the figure is input + output as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadgen.workload.lengths import LengthDist

Z_BURST = 2.326  # the standard normal's 99th percentile
SAMPLES = 20_000  # draws to estimate a distribution's moments (seeded: the same on every run)


@dataclass(frozen=True)
class KvMix:
    mean_in: float  # mean tokens held per request from prompts (the history's, multi-turn)
    mean_out: float  # ... and from outputs
    std: float  # standard deviation of the per-request total
    longest: int | None  # the longest request's total; None: unbounded

    @property
    def mean(self) -> float:
        return self.mean_in + self.mean_out

    def per_request(self, concurrency: float) -> float:
        """mu + z x sigma / sqrt(C), at most the longest request (module docstring)."""
        figure = self.mean + Z_BURST * self.std / math.sqrt(max(concurrency, 1.0))
        return min(figure, self.longest) if self.longest is not None else figure

    def split(self, concurrency: float) -> tuple[int, int]:
        """``per_request(C)`` as whole (input, output) tokens in the proportion of the means, for
        ``loadgen.run.kv_guard.decide``; exactly (input, output) for fixed lengths."""
        total = math.ceil(self.per_request(concurrency) - 1e-9)
        n_in = math.ceil(total * self.mean_in / self.mean - 1e-9) if self.mean else 0
        return n_in, total - n_in


def from_dists(inputs: LengthDist, outputs: LengthDist, turns: int = 1) -> KvMix:
    """The mix of synthetic lengths; K turns: T = sum of K independent (input + output) draws."""
    if inputs.kind == "fixed" and outputs.kind == "fixed":
        return KvMix(float(inputs.value * turns), float(outputs.value * turns), 0.0,
                     (inputs.value + outputs.value) * turns)
    rng = np.random.default_rng(0x4B56)
    ins = inputs.draw(rng, SAMPLES * turns).reshape(SAMPLES, turns).sum(axis=1)
    outs = outputs.draw(rng, SAMPLES * turns).reshape(SAMPLES, turns).sum(axis=1)
    longest = None if inputs.upper is None or outputs.upper is None else (inputs.upper + outputs.upper) * turns
    return KvMix(float(ins.mean()), float(outs.mean()), float((ins + outs).std()), longest)


def from_pairs(pairs: list[tuple[int, int]], turns: int = 1) -> KvMix:
    """The mix of a dataset's (known input, output) pairs, each line equally likely; K turns: K
    lines in a row (the moments of a sum of K independent draws: K x mu, sqrt(K) x sigma)."""
    ins = np.array([p[0] for p in pairs], dtype=float)
    outs = np.array([p[1] for p in pairs], dtype=float)
    return KvMix(float(ins.mean()) * turns, float(outs.mean()) * turns, float((ins + outs).std()) * math.sqrt(turns),
                 int((ins + outs).max()) * turns)


def too_long_message(count: int, total: int, worst_line: int | None, worst_tokens: int, max_model_len: int,
                     where: str) -> str:
    """The start check's line for requests longer than the server's context."""
    line = f" (worst: line {worst_line}, {worst_tokens:,} tokens)" if worst_line is not None else ""
    return (f"config error: {count:,} of {total:,} requests of {where} exceed the server's max_model_len "
            f"{max_model_len:,} (input + output tokens){line}; drop or shorten them, or use a server with a "
            "longer context")


def scenario_mix(scenario, dataset=None) -> KvMix:
    """The mix a scenario sends: its dataset's known lengths (a line without output_tokens: the
    output distribution's mean; a text prompt counts 0: only the server knows it), else its
    length distributions; ``workload.turns`` turns each."""
    return workload_mix(scenario.length_dist("input"), scenario.length_dist("output"), dataset,
                        scenario.workload.turns)


def workload_mix(inputs: LengthDist, outputs: LengthDist, dataset=None, turns: int = 1) -> KvMix:
    """``scenario_mix`` from the distributions and the dataset themselves (the what-if's workload)."""
    if not dataset:
        return from_dists(inputs, outputs, turns)
    default_out = round(from_dists(outputs, outputs).mean_out)
    return from_pairs([(known_input(r), r.output_tokens or default_out) for r in dataset], turns)


def known_input(r) -> int:
    """A dataset request's input tokens as far as the client knows them (text: 0)."""
    if r.input_tokens is not None:
        return r.input_tokens
    return len(r.prompt) if isinstance(r.prompt, tuple) else 0
