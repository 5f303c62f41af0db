"""Speculative decoding and the prefix cache over one window, as the server reports them: pure.

Window readers (``loadgen.server.window``): each takes the server's flavor and the two edge reads
of ``/metrics`` and returns figures of the stage's ``server`` object, None where the server does
not export the series (or a counter went down: a restart in the window).

Speculative decoding (``spec_decode``):
- vLLM and llama.cpp export counters; over the window
  ``spec_accept_length`` = 1 + Δaccepted_tokens / Δdrafts (tokens per verify step: the accepted
  drafts plus the token the target model adds) and
  ``spec_acceptance_rate`` = Δaccepted_tokens / Δdraft_tokens; vLLM also counts the accepted
  drafts per draft position, and ``spec_acceptance_by_position`` = [Δaccepted at position k /
  Δdrafts for k = 0, 1, ...] (the share of verify steps that kept the k-th draft token: it falls
  with k, and 1 + its sum is ``spec_accept_length``).
- SGLang exports only gauges of its recent batches (``sglang:spec_accept_length``, which counts the
  verified token too, and ``sglang:spec_accept_rate``); they are read at the window's close edge,
  not averaged over it, and ``spec_source`` says so (``gauge_at_close``; else ``counters``).

Prefix cache (``prefix_cache``), ``prefix_cache_hit_rate`` = cached prompt tokens / prompt tokens:
- vLLM: Δ``vllm:prefix_cache_hits_total`` / Δ``vllm:prefix_cache_queries_total`` (tokens);
- SGLang: Δ``sglang:cached_tokens_total`` / Δ``sglang:prompt_tokens_total`` (prompt tokens count
  the cached ones); a server without the counter gives its ``sglang:cache_hit_rate`` gauge at the
  close edge (``prefix_cache_source``: ``gauge_at_close``);
- llama.cpp: Δ``llamacpp:prompt_tokens_cached_total`` / (Δ``llamacpp:prompt_tokens_total`` +
  Δcached), as its prompt counter holds only the tokens it evaluated.
``prefix_cache_hit_tokens`` is the numerator when it comes from counters (None from a gauge).
"""

from __future__ import annotations

from loadgen.server.edges import Edge, counter_delta
from loadgen.server.replies import Samples

# flavor -> (accepted tokens, drafts, draft tokens) counters
SPEC_COUNTERS = {
    "vllm": ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total",
             "vllm:spec_decode_num_draft_tokens_total"),
    "llamacpp": ("llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_drafts_total",
                 "llamacpp:spec_decode_num_draft_tokens_total"),
}
SGLANG_SPEC_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")
# flavor -> accepted tokens per draft position (label ``position``)
SPEC_PER_POSITION = {"vllm": "vllm:spec_decode_num_accepted_tokens_per_pos_total"}

# flavor -> (hit tokens, denominator counters whose deltas add up to the prompt tokens)
PREFIX_COUNTERS = {
    "vllm": ("vllm:prefix_cache_hits_total", ("vllm:prefix_cache_queries_total",)),
    "sglang": ("sglang:cached_tokens_total", ("sglang:prompt_tokens_total",)),
    "llamacpp": ("llamacpp:prompt_tokens_cached_total",
                 ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total")),
}
SGLANG_CACHE_GAUGE = "sglang:cache_hit_rate"

SPEC_KEYS = ("spec_accept_length", "spec_acceptance_rate", "spec_drafts", "spec_source", "spec_acceptance_by_position")
PREFIX_KEYS = ("prefix_cache_hit_rate", "prefix_cache_hit_tokens", "prefix_cache_source")


def gauge_mean(edge: Edge | None, name: str) -> float | None:
    """The mean of gauge ``name`` over its label sets (DP ranks) in ``edge``; None if absent."""
    if edge is None:
        return None
    values = [v for _, v in _series(edge.samples, name) if v == v]  # NaN-free
    return sum(values) / len(values) if values else None


def _series(samples: Samples, name: str) -> list:
    return samples.get(name) or []


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def spec_decode(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """``spec_accept_length`` = 1 + Δaccepted / Δdrafts, ``spec_acceptance_rate`` = Δaccepted /
    Δdraft_tokens, ``spec_drafts`` = Δdrafts (counters); SGLang: its gauges at the close edge."""
    out = dict.fromkeys(SPEC_KEYS)
    if flavor == "sglang":
        length, rate = (gauge_mean(closed, name) for name in SGLANG_SPEC_GAUGES)
        if length:  # 0 = no speculative step yet (or speculation off)
            out.update(spec_accept_length=length, spec_acceptance_rate=rate, spec_source="gauge_at_close")
        return out
    names = SPEC_COUNTERS.get(flavor or "")
    if names is None:
        return out
    accepted, drafts, draft_tokens = (counter_delta(opened, closed, n) for n in names)
    if accepted is None or not drafts:
        return out
    out.update(spec_accept_length=1 + accepted / drafts, spec_acceptance_rate=_ratio(accepted, draft_tokens),
               spec_drafts=int(drafts), spec_source="counters",
               spec_acceptance_by_position=_per_position(opened, closed, SPEC_PER_POSITION.get(flavor), drafts))
    return out


def _per_position(opened: Edge, closed: Edge, name: str | None, drafts: float) -> list[float] | None:
    """[Δaccepted at position k / Δdrafts, k = 0, 1, ...] from a counter labelled ``position``
    (summed over its other label sets, e.g. engines); None when the server has no such counter."""
    if name is None:
        return None
    positions = sorted({lb["position"] for lb, _ in _series(closed.samples, name) if lb.get("position", "").isdigit()},
                       key=int)
    accepted = [counter_delta(_at_position(opened, name, k), _at_position(closed, name, k), name) for k in positions]
    if not accepted or None in accepted:
        return None
    return [a / drafts for a in accepted]


def _at_position(edge: Edge, name: str, position: str) -> Edge:
    """``edge`` with only counter ``name``'s series at draft position ``position``."""
    return Edge(edge.t, {name: [(lb, v) for lb, v in _series(edge.samples, name) if lb.get("position") == position]})


def prefix_cache(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """``prefix_cache_hit_rate`` = Δcached prompt tokens / Δprompt tokens (per flavor, module
    docstring); SGLang without ``cached_tokens_total``: its hit-rate gauge at the close edge."""
    out = dict.fromkeys(PREFIX_KEYS)
    names = PREFIX_COUNTERS.get(flavor or "")
    if names is None:
        return out
    hits_name, den_names = names
    hits = counter_delta(opened, closed, hits_name)
    dens = [counter_delta(opened, closed, n) for n in den_names]
    if hits is not None and None not in dens and sum(dens) > 0:
        out.update(prefix_cache_hit_rate=hits / sum(dens), prefix_cache_hit_tokens=int(hits),
                   prefix_cache_source="counters")
    elif flavor == "sglang" and (rate := gauge_mean(closed, SGLANG_CACHE_GAUGE)) is not None:
        out.update(prefix_cache_hit_rate=rate, prefix_cache_source="gauge_at_close")
    return out
