"""The ``engine`` timing model: one step clock shared by every request, like a real LLM server.

Pure: no I/O and no clock. ``Engine.step()`` advances the schedule by one engine iteration and
returns ``(step_duration_s, events)``; a runner elsewhere sleeps ``step_duration_s / time_scale``
and then delivers the events. TTFT and ITL are not configured, they emerge from the schedule:

- Each step every running request whose prefill is done decodes ``k`` tokens: ``k = 1``, or with
  simulated speculative decoding ``k`` drawn from the seeded ``spec_accept`` distribution
  (``spec_accept[i]`` = probability that ``i + 1`` tokens are accepted in one step).
- The same step spends a chunked-prefill budget of ``prefill_chunk_tokens`` on requests still
  prefilling (oldest first), then admits waiting requests (FIFO) into that budget. A request whose
  prefill completes emits its first token at the end of that step. A request that emits its last
  token in a step keeps its slot (``max_running``) and its KV until that step ends: a waiting
  request takes them in the next step (a real scheduler learns a request finished once the step's
  tokens are sampled; llama-server launches the deferred task in the batch after the release).
- Prefix caching (``prefix_cache_blocks`` > 0, see ``loadgen.engine_model.prefix``): at admission the
  prompt's leading blocks found in the cache count as already prefilled.
- Step duration = ``step_base_s + step_per_seq_s * batch + step_per_prefill_token_s * prefill
  + step_per_prefill_pair_s * pairs + step_per_context_token_s * context``, where ``batch`` =
  requests that decoded or prefilled in the step, ``prefill`` = prompt tokens computed in the step,
  ``pairs`` = for each of those tokens, the tokens of its sequence before it (a prompt token at
  position t attends over t earlier ones: a chunk of positions [s, e) adds (s + e - 1)(e - s) / 2)
  and ``context`` = the context of the requests that decoded (prompt + tokens generated so far,
  summed): the KV cache a decode step reads. Both coefficients default to 0 (a step's cost
  independent of context length). With ``step_batch_s`` knots, measured (batch, seconds) points,
  the batch part ``step_base_s + step_per_seq_s * batch`` is the straight lines between them
  instead (``batch_cost_s``).

KV cache, in tokens (rounded up to ``block_size`` per request): a request holds
``prompt + generated`` tokens. Admission needs ``prompt + generated + 1`` tokens free, plus
``admit_output_reserve * remaining output`` (SGLang-style headroom; 0 = vLLM-style). When a
decoding request needs more KV than is free, the newest running request is preempted (vLLM) /
retracted (SGLang): its KV is freed and it returns to the head of the queue, to be recomputed
(prefill of prompt + tokens already generated) when it is admitted again. Tokens already sent to
the client are never re-sent. ``preemptions_total`` counts these events.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from dataclasses import dataclass, field

from loadgen.engine_model.prefix import PrefixCache

WAITING, RUNNING, FINISHED, ABORTED = "waiting", "running", "finished", "aborted"


@dataclass(eq=False)
class SimRequest:
    """One generation request as both timing models see it.

    ``output_tokens`` is how many tokens will be generated (already reduced by a seeded early EOS
    if any). ``sink`` is opaque to the models: whoever receives the emitted tokens.
    """

    prompt_tokens: int
    output_tokens: int
    sink: object = None
    generated: int = 0
    state: str = WAITING
    prefill_target: int = 0  # tokens to (re)compute before decoding: prompt + generated at admission
    prefill_done: int = 0
    kv_held: int = 0  # KV tokens allocated (block-rounded)
    preemptions: int = 0
    prefix_hashes: tuple[int, ...] = ()  # loadgen.engine_model.prefix.block_hashes of the prompt (caching on)
    cached_tokens: int | None = None  # prompt tokens found in the prefix cache at first admission
    t_scheduled: float | None = None  # wall clock of the step that first admitted it (set by the runner)


@dataclass
class EngineParams:
    kv_tokens: int = 1_000_000
    block_size: int = 1
    max_running: int = 256
    max_queued: int = 0  # 0 = unlimited
    prefill_chunk_tokens: int = 8192
    step_base_s: float = 0.010
    step_per_seq_s: float = 0.0001
    step_per_prefill_token_s: float = 0.00002
    step_per_context_token_s: float = 0.0
    step_per_prefill_pair_s: float = 0.0  # per (prompt token prefilled, earlier token of its sequence)
    # (batch, seconds) knots of the step's batch part, measured; () = step_base_s + step_per_seq_s x batch
    step_batch_s: tuple[tuple[float, float], ...] = ()
    spec_accept: tuple[float, ...] = (1.0,)
    admit_output_reserve: float = 0.0
    seed: int = 0
    prefix_cache_blocks: int = 0  # 0: no prefix caching
    prefix_block_tokens: int = 16


@dataclass
class EngineStats:
    steps_total: int = 0
    preemptions_total: int = 0
    prompt_tokens_total: int = 0  # prompt tokens whose prefill completed (first time only)
    generated_tokens_total: int = 0
    # speculative decoding (spec_accept with more than one entry): one draft per request per decode
    # step, drafting len(spec_accept) - 1 tokens, of which k - 1 are accepted (k tokens emitted)
    spec_drafts_total: int = 0
    spec_accepted_tokens_total: int = 0


def batch_cost_s(p: EngineParams, batch: float) -> float:
    """The step's batch part: ``step_base_s + step_per_seq_s x batch``, or with ``step_batch_s``
    knots (batch, s) the straight lines between them, continued beyond the first and the last with
    the slope ``step_per_seq_s`` (a server whose step is not one line in the batch: llama.cpp on a
    CPU took 6.1, 12.2 and 14.3 ms at batch 1, 2 and 4)."""
    knots = p.step_batch_s
    if not knots:
        return p.step_base_s + p.step_per_seq_s * batch
    if batch <= knots[0][0]:
        return knots[0][1] + p.step_per_seq_s * (batch - knots[0][0])
    for (x0, y0), (x1, y1) in itertools.pairwise(knots):
        if batch <= x1:
            return y0 + (y1 - y0) * (batch - x0) / (x1 - x0)
    return knots[-1][1] + p.step_per_seq_s * (batch - knots[-1][0])


class QueueFull(Exception):
    """The waiting queue is at ``max_queued``: the server answers 503, like SGLang."""


def emit_tokens(req: SimRequest, n: int, stats: EngineStats, events: list) -> bool:
    """``n`` more tokens of ``req``: counted (the request's and ``stats.generated_tokens_total``),
    the chunk appended to ``events`` as (request, tokens, finished); a request that reached its
    output length is FINISHED. Returns whether it finished (the caller frees what it held). Both
    timing models emit through here."""
    req.generated += n
    stats.generated_tokens_total += n
    done = req.generated >= req.output_tokens
    events.append((req, n, done))
    if done:
        req.state = FINISHED
    return done


@dataclass
class Engine:
    params: EngineParams
    running: list[SimRequest] = field(default_factory=list)
    waiting: deque[SimRequest] = field(default_factory=deque)
    kv_used: int = 0
    stats: EngineStats = field(default_factory=EngineStats)
    admitted: list[SimRequest] = field(default_factory=list)  # admitted for the first time in the last step
    kv_lost: int = 0  # KV tokens a leak took (drift_kv_leak_tokens_per_h): the pool is kv_tokens - kv_lost

    def __post_init__(self) -> None:
        self._rng = random.Random(self.params.seed)
        cum, acc = [], 0.0
        for p in self.params.spec_accept:
            acc += p
            cum.append(acc)
        self._spec_cum = cum
        self._spec = len(cum) > 1
        self._context = 0  # context tokens of the requests decoding in the step being computed
        # requests that finished in the step being computed: their slots and KV are free only after
        # it (a real scheduler learns a request finished once the step's tokens are sampled)
        self._done_slots = self._done_kv = 0
        self._pairs = 0  # (prompt token, earlier token of its sequence) pairs prefilled in that step
        p = self.params
        self.prefix_cache = (PrefixCache(p.prefix_block_tokens, p.prefix_cache_blocks)
                             if p.prefix_cache_blocks else None)

    # -- requests in and out -------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        """Queue ``req``; raises QueueFull when ``max_queued`` requests already wait."""
        cap = self.params.max_queued
        if cap and len(self.waiting) >= cap:
            raise QueueFull(f"{len(self.waiting)} requests already queued (max_queued={cap})")
        req.state = WAITING
        req.prefill_target = req.prompt_tokens
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Drop ``req`` wherever it is (client gone, fault injected) and free its KV."""
        if req.state == RUNNING:
            self.running.remove(req)
            self._free(req)
        elif req.state == WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        if req.state in (RUNNING, WAITING):
            req.state = ABORTED

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    # -- KV ----------------------------------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        b = self.params.block_size
        return -(-tokens // b) * b

    def _free(self, req: SimRequest) -> None:
        self.kv_used -= req.kv_held
        req.kv_held = 0

    def _grow(self, req: SimRequest, tokens: int) -> bool:
        """Make ``req`` hold KV for ``tokens`` tokens; False if the pool has no room."""
        need = self._blocks(tokens) - req.kv_held
        if need <= 0:
            return True
        if self.kv_used + self._done_kv + need > self.params.kv_tokens - self.kv_lost:
            return False
        self.kv_used += need
        req.kv_held += need
        return True

    def _preempt_newest(self) -> SimRequest:
        victim = self.running.pop()
        self._free(victim)
        victim.state = WAITING
        victim.prefill_target = victim.prompt_tokens + victim.generated
        victim.prefill_done = 0
        victim.preemptions += 1
        self.stats.preemptions_total += 1
        return victim

    # -- one engine iteration --------------------------------------------------------------------
    def step(self) -> tuple[float, list[tuple[SimRequest, int, bool]]]:
        """Run one iteration. Returns (duration_s, [(request, new_tokens, finished), ...])."""
        if self.idle:
            return 0.0, []
        events: list[tuple[SimRequest, int, bool]] = []
        self.admitted.clear()
        self._context = self._pairs = self._done_slots = self._done_kv = 0
        preempted = self._decode(events)
        batch = len(events)
        prefilled, prefill_seqs = self._prefill(events, admit=not preempted)
        batch += prefill_seqs
        p = self.params
        self.stats.steps_total += 1
        return (batch_cost_s(p, batch) + p.step_per_prefill_token_s * prefilled
                + p.step_per_prefill_pair_s * self._pairs + p.step_per_context_token_s * self._context), events

    def _draw_accept(self) -> int:
        if not self._spec:
            return 1
        u = self._rng.random()
        for i, c in enumerate(self._spec_cum):
            if u < c:
                return i + 1
        return len(self._spec_cum)

    def _decode(self, events: list) -> list[SimRequest]:
        """Decode one step for every running request past prefill; preempt when KV runs out."""
        preempted: list[SimRequest] = []
        i = 0
        while i < len(self.running):
            req = self.running[i]
            if req.prefill_done < req.prefill_target:
                i += 1
                continue
            k = min(self._draw_accept(), req.output_tokens - req.generated)
            while not self._grow(req, req.prompt_tokens + req.generated + k):
                preempted.append(self._preempt_newest())
                if req.state != RUNNING:  # it was the newest itself
                    break
            if req.state != RUNNING:
                break
            self._context += req.prompt_tokens + req.generated
            if self._spec:
                self.stats.spec_drafts_total += 1
                self.stats.spec_accepted_tokens_total += k - 1
            self._emit(req, k, events)
            if req.state == FINISHED:
                continue  # _emit removed it from running; index i now holds the next one
            i += 1
        # Oldest victim at the head of the queue: it was preempted last.
        for victim in preempted:
            self.waiting.appendleft(victim)
        return preempted

    def _emit(self, req: SimRequest, k: int, events: list) -> None:
        if emit_tokens(req, k, self.stats, events):
            self.running.remove(req)
            self._done_slots += 1
            self._done_kv += req.kv_held
            self._free(req)

    def _prefill(self, events: list, admit: bool) -> tuple[int, int]:
        """Spend the chunked-prefill budget; returns (prefill tokens computed, sequences touched)."""
        p = self.params
        budget = p.prefill_chunk_tokens
        computed = seqs = 0
        for req in [r for r in self.running if r.prefill_done < r.prefill_target]:
            if budget <= 0:
                break
            n = self._prefill_one(req, budget, events)
            budget -= n
            computed += n
            seqs += 1
        while admit and budget > 0 and self.waiting and len(self.running) + self._done_slots < p.max_running:
            req = self.waiting[0]
            reserve = int(p.admit_output_reserve * (req.output_tokens - req.generated))
            need = self._blocks(req.prefill_target + 1 + (reserve if self.running else 0))
            if self.kv_used + self._done_kv + need > p.kv_tokens - self.kv_lost:
                break  # FIFO: the head waits for room, nobody overtakes it
            self.waiting.popleft()
            req.state = RUNNING
            # cached leading prompt blocks cost no prefill (a recompute after preemption too)
            cache = self.prefix_cache
            req.prefill_done = cache.lookup(req.prefix_hashes, req.prefill_target) if cache is not None else 0
            if cache is not None and req.cached_tokens is None:  # the first admission: usage's cached_tokens
                req.cached_tokens = req.prefill_done
            if req.preemptions == 0 and req.generated == 0:  # queue time ends at the first admission
                self.admitted.append(req)
            self._grow(req, req.prefill_target + 1)
            self.running.append(req)
            n = self._prefill_one(req, budget, events)
            budget -= n
            computed += n
            seqs += 1
        return computed, seqs

    def _prefill_one(self, req: SimRequest, budget: int, events: list) -> int:
        n = min(budget, req.prefill_target - req.prefill_done)
        start = req.prefill_done
        self._pairs += (2 * start + n - 1) * n // 2  # positions start .. start + n - 1, each over those before it
        req.prefill_done += n
        if req.prefill_done >= req.prefill_target:
            if self.prefix_cache is not None:
                self.prefix_cache.insert(req.prefix_hashes)
            if req.generated == 0:  # a recompute after preemption is not a new prompt
                self.stats.prompt_tokens_total += req.prompt_tokens
            self._emit(req, 1, events)  # the prefill step samples the next token
        return n
