"""KV-capacity guard: refuse (or clamp) a stage whose requests cannot all fit in the server's KV cache.

Pure logic, no I/O and no clock. Discovery of the capacity is ``loadgen.server.start_check`` (with
the parsers of ``loadgen.server.replies``); the over-capacity judgment of a running stage is
``loadgen.server.overload``. This module decides from numbers.

A closed-loop stage at concurrency C keeps C requests in flight, each holding up to
input + output tokens of KV cache at its end. If C of them do not fit, the server queues,
preempts (vLLM) or retracts (SGLang) requests: the stage measures thrashing, not the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from loadgen.config import GUARD_ACTIONS
from loadgen.errors import ConfigError
from loadgen.stats.stage_load import load_label


def _exact(concurrency: int, input_tokens: int, output_tokens: int, margin: float) -> Fraction:
    # Exact rational arithmetic: with floats, 3 x 1000 x 1.1 = 3300.0000000000005 > 3300 would
    # refuse a stage that fits exactly. Fraction(str(0.1)) is 1/10, what the user wrote.
    return concurrency * (input_tokens + output_tokens) * (1 + Fraction(str(margin)))


def projected_kv_tokens(concurrency: int, input_tokens: int, output_tokens: int, margin: float) -> float:
    """KV tokens a stage needs when every in-flight request reaches its last token.

    projected = concurrency x (input_tokens + output_tokens) x (1 + margin)

    e.g. 512 x (1000 + 1000) x 1.0 = 1,024,000. ``margin`` (>= 0) covers chat-template and
    BOS tokens, block rounding and the server's own reservations.
    """
    return float(_exact(concurrency, input_tokens, output_tokens, margin))


def max_fitting_concurrency(capacity: int, input_tokens: int, output_tokens: int, margin: float) -> int:
    """Largest concurrency whose projection fits: floor(capacity / ((in + out) x (1 + margin)))."""
    per_request = _exact(1, input_tokens, output_tokens, margin)
    if per_request <= 0:
        raise ConfigError("input_tokens + output_tokens", 0, "must be > 0 for the KV guard")
    return math.floor(Fraction(capacity) / per_request)


def max_fitting_concurrency_of(capacity: int, mix, margin: float) -> int:
    """``max_fitting_concurrency`` for a mix of lengths (``loadgen.workload.mix.KvMix``), projected
    as ``decide`` projects each stage: C x (in + out) x (1 + margin) with (in, out) =
    ``mix.split(C)``, whose per-request figure shrinks towards the mean as C grows. The largest C
    that fits (C x per_request(C) rises with C: bisection); fixed lengths give exactly
    ``max_fitting_concurrency``."""
    lo, hi = 0, max(1, int(capacity))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _exact(mid, *mix.split(mid), margin) <= capacity:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class GuardDecision:
    """What to do with one stage. ``run_concurrency`` is None when the stage must not run.
    ``concurrency`` / ``run_concurrency`` are the stage's load: users, or requests/s in open-loop
    mode (``decide_rate``), where ``projected_tokens`` comes from Little's law."""

    concurrency: float
    allowed: bool
    run_concurrency: float | None
    projected_tokens: float
    capacity_tokens: int | None
    action: str
    breach: bool
    message: str


def _check(margin: float, action: str) -> None:
    if action not in GUARD_ACTIONS:
        raise ConfigError("guard.action", action, "must be one of abort, clamp, warn", "abort is the default")
    if not margin >= 0:  # also rejects NaN
        raise ConfigError("guard.margin", margin, "must be >= 0", "e.g. 0.05 for 5% headroom")


def decide(
    concurrency: int,
    capacity: int | None,
    input_tokens: int,
    output_tokens: int,
    margin: float,
    action: str,
) -> GuardDecision:
    """Decide one stage: breach = projected_kv_tokens(...) > capacity.

    No breach, or capacity None (unknown: unguarded) -> run as asked. On a breach: ``abort`` refuses
    the stage; ``clamp`` runs max_fitting_concurrency(...) instead (refused if that is 0);
    ``warn`` runs it anyway with breach=True.
    """
    _check(margin, action)
    projected = projected_kv_tokens(concurrency, input_tokens, output_tokens, margin)
    if capacity is None:
        msg = (
            f"KV guard off for concurrency {concurrency}: server KV capacity unknown "
            f"(set guard.kv_capacity_tokens to enable it)"
        )
        return GuardDecision(concurrency, True, concurrency, projected, None, action, False, msg)
    need = f"{concurrency} x ({input_tokens}+{output_tokens}) x {1 + margin:g} = {projected:,.0f}"
    if _exact(concurrency, input_tokens, output_tokens, margin) <= capacity:
        msg = f"stage concurrency {concurrency}: projected KV tokens {need} fit capacity {capacity:,}"
        return GuardDecision(concurrency, True, concurrency, projected, capacity, action, False, msg)

    fit = max_fitting_concurrency(capacity, input_tokens, output_tokens, margin)
    head = f"stage concurrency {concurrency}: projected KV tokens {need} exceed capacity {capacity:,}"
    if fit < 1:
        msg = (
            f"{head}; not even one request fits, refusing "
            f"(lower input/output tokens, or check guard.kv_capacity_tokens)"
        )
        return GuardDecision(concurrency, False, None, projected, capacity, action, True, msg)
    return _breach(concurrency, fit, projected, capacity, action, head,
                   f"use --guard-action clamp or lower stages.max to {fit}",
                   f"clamped to concurrency {fit} (use stages.max {fit} to make this the plan)")


def decide_spread(concurrency: int, capacities: tuple[tuple[str, int], ...], input_tokens: int, output_tokens: int,
                  margin: float, action: str) -> GuardDecision:
    """Decide a closed-loop stage whose C requests the client spreads over N replicas
    (``capacities``: (name, KV tokens) of each, all known). Each replica holds its share,
    ceil(C / N) requests: exactly the most ``least_inflight`` lets one process put on a replica
    (it sends to a replica with the fewest in flight, so no count passes another's by more than
    one), and round robin's when the replicas are equally fast (a slower one holds more: Little's
    law). The stage fits when every replica's share fits its own capacity:

        ceil(C / N) x (input + output) x (1 + margin) <= capacity_i   for every replica i

    and the fleet's ceiling is N x the smallest replica's ``max_fitting_concurrency`` (a replica
    with less KV binds first; the capacity quoted is the fleet's, the sum). The actions are
    ``decide``'s."""
    _check(margin, action)
    n, total = len(capacities), sum(tokens for _, tokens in capacities)
    share = -(-concurrency // n)
    projected = projected_kv_tokens(concurrency, input_tokens, output_tokens, margin)
    over = [(name, tokens) for name, tokens in capacities if _exact(share, input_tokens, output_tokens, margin) > tokens]
    per = f"{share} x ({input_tokens}+{output_tokens}) x {1 + margin:g} = {projected_kv_tokens(share, input_tokens, output_tokens, margin):,.0f}"
    if not over:
        msg = (f"stage concurrency {concurrency}: {share} per replica of {n}, projected KV tokens {per} fit every "
               f"replica (fleet capacity {total:,})")
        return GuardDecision(concurrency, True, concurrency, projected, total, action, False, msg)
    fit = n * min(max_fitting_concurrency(tokens, input_tokens, output_tokens, margin) for _, tokens in capacities)
    name, tokens = min(over, key=lambda item: item[1])
    head = (f"stage concurrency {concurrency}: {share} per replica of {n}, projected KV tokens {per} exceed "
            f"replica {name}'s capacity {tokens:,} (fleet capacity {total:,})")
    if fit < 1:
        return GuardDecision(concurrency, False, None, projected, total, action, True,
                             f"{head}; not even one request per replica fits, refusing")
    return _breach(concurrency, fit, projected, total, action, head,
                   f"use --guard-action clamp or lower stages.max to {fit}",
                   f"clamped to concurrency {fit} (use stages.max {fit} to make this the plan)")


def spread_ceiling(capacities: tuple[tuple[str, int], ...], mix, margin: float) -> int:
    """The fleet's KV ceiling with hosts spread by the client (``decide_spread``'s rule): N x the
    smallest replica's ``max_fitting_concurrency_of``."""
    return len(capacities) * min(max_fitting_concurrency_of(tokens, mix, margin) for _, tokens in capacities)


def decide_rate(rate_per_s: float, mean_duration_s: float | None, capacity: int | None,
                input_tokens: int, output_tokens: int, margin: float, action: str) -> GuardDecision:
    """Decide one open-loop stage by Little's law: the stage holds L = rate x W requests in flight
    (W = the expected request duration, E2E mean), each up to input + output tokens of KV cache:

        projected = rate x W x (input + output) x (1 + margin)

    Breach = projected > capacity; the same actions as ``decide``: abort refuses it, clamp runs
    the largest rate that fits, capacity / (W x (in + out) x (1 + margin)) (``max_fitting_rate``,
    rounded down to 3 significant digits), warn runs it flagged. Capacity or W unknown: unguarded.
    """
    from loadgen.workload.arrivals import max_fitting_rate

    _check(margin, action)
    if capacity is None or mean_duration_s is None:
        why = "server KV capacity unknown" if capacity is None else "no request duration known yet"
        msg = f"KV guard off for {load_label(rate_per_s, rate=True)}: {why}"
        return GuardDecision(rate_per_s, True, rate_per_s, 0.0, capacity, action, False, msg)
    per_request = (input_tokens + output_tokens) * (1 + margin)
    projected = rate_per_s * mean_duration_s * per_request
    need = (f"{load_label(rate_per_s, rate=True)} x {mean_duration_s:.3g} s x ({input_tokens}+{output_tokens}) x {1 + margin:g}"
            f" = {projected:,.0f}")
    if projected <= capacity * (1 + 1e-12):
        msg = f"{load_label(rate_per_s, rate=True)}: projected KV tokens {need} fit capacity {capacity:,}"
        return GuardDecision(rate_per_s, True, rate_per_s, projected, capacity, action, False, msg)
    fit = _round_down(max_fitting_rate(capacity, input_tokens + output_tokens, mean_duration_s, margin))
    head = f"{load_label(rate_per_s, rate=True)}: projected KV tokens {need} exceed capacity {capacity:,}"
    return _breach(rate_per_s, fit, projected, capacity, action, head,
                   f"use --guard-action clamp, or rates up to {load_label(fit, rate=True)}",
                   f"clamped to {load_label(fit, rate=True)}")


def _breach(load: float, fit: float, projected: float, capacity: int, action: str, head: str,
            abort_hint: str, clamped: str) -> GuardDecision:
    """A stage over capacity, as ``action`` says: abort refuses it (``abort_hint``: the fix),
    clamp runs the largest load that fits (``fit``; ``clamped`` says so), warn runs it flagged."""
    if action == "abort":
        return GuardDecision(load, False, None, projected, capacity, action, True, f"{head}; refusing it ({abort_hint})")
    if action == "clamp":
        return GuardDecision(load, True, fit, projected, capacity, action, True, f"{head}; {clamped}")
    msg = f"{head}; running anyway because --guard-action warn (expect queueing/preemption)"
    return GuardDecision(load, True, load, projected, capacity, action, True, msg)


def _round_down(x: float, digits: int = 3) -> float:
    """x rounded down to ``digits`` significant digits (a clamped rate people can read)."""
    scale = 10 ** (digits - 1 - math.floor(math.log10(x)))
    return math.floor(x * scale * (1 + 1e-12)) / scale
