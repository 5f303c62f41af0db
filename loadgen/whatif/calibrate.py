"""Fit the simulator's engine to a measured sweep: summary.json's stage rows -> an engine preset.

Pure (the summary is passed in; ``loadgen.whatif.__main__`` reads and writes the files). The model
is the engine's own (``loadgen.engine_model.engine``): one step = a + b x batch + p x prefill tokens in the
step, each decode step emitting L tokens per running request on average. Linear in the batch
because a decode step's cost is the weights' read (a) plus per-sequence attention and sampling (b);
with runs of two prompt lengths, a context term c x (context tokens of the decoding requests) joins
(below); one sweep of fixed lengths cannot tell it from b.

From each closed-loop stage at concurrency C with N output and I input tokens per request:

- L = (N - 1) / (N / tokens_per_chunk - 1)  (a request's first token comes from its prefill step
  alone, so an N-token output takes 1 + (N - 1) / L chunks); 1 without speculative decoding, and 1
  when the server's /metrics were read and said it ran none (``stage_accept_length``)
- decode step time d = TPOT p50 x L
- prefill tokens per step x = request rate x (C - 1) / C x I x d, request rate = output tok/s / N
  (the prompts a request's decode steps share: the other C - 1 users'; none at C = 1)
- batch = 1 + (C - 1) x n / (n + 1), n = 1 + (N - 1) / L (``occupied_batch``): the request
  itself, and each other user's request in n of every n + 1 steps, its cycle (``cycle_steps``):
  n steps in the engine (its prefill step, then its decode steps) and one without, as the
  successor, sent when the last chunk arrives, reaches the engine while the next step runs and
  joins the one after; the server's running_max when it said less than C (every step full). With
  batch = C, b came out 5.4-6.4 % low on the virtual engine's own rows, 3.3-4.4 % with this (the
  rest: the TPOT p50 sits below the mean step a decoding request sees;
  docs/whatif.md 'The model the calibration fits')
- where prompts are rare (request rate x step below ``RARE_PROMPTS``) the median chunk gap is the
  step instead (x = 0, batch 1 + round((C - 1) x n / (n + 1)), the median step's: ``decode_step``)
- context tokens read per step K = batch x (I + N / 2) (a decoder reads its context's KV, on
  average I + N / 2 tokens)

c first (``context_cost``), then least squares on relative errors of

    d_k - c x K_k = a + b x batch_k + p x x_k   (each fitted stage)
    TTFT(C=1) = a + b + p x I                   (the lowest stage at C=1: an idle engine, one step)

and, when the server reported its own prompt time S at C=1 (llama.cpp: ``server.prompt_per_token``)
for two prompt lengths, a prompt's cost that grows with its square, q (``step_per_prefill_pair_ns``:
a prompt token at position t attends over the t before it). q comes first, from the server's times
alone (``prompt_square_cost``: S(I) = a + b + p x I + q x I (I - 1) / 2, with a + b read from the
C=1 decode step), as c does from the decode steps; then q x (x_k (I - 1) / 2) joins each decode
equation's known share, q x I (I - 1) / 2 each TTFT's, and S(I) joins the equations (a prompt step
without the client in it). llama.cpp on one CPU core took 0.82 ms per prompt token at 128 tokens,
1.05 at 1024 and 1.22 at 1536, whatever its micro-batch (-ub 128, 512 or 2048): the attention over
the prompt so far, not the chunking. Without those
times q stays 0: the client's TTFT alone cannot tell it from p and the client's overhead.

With fixed lengths x_k is nearly proportional to C (x ~ C x I x L / N), so the decode equations
fix a and b + p I L / N; the C=1 TTFT separates p. That TTFT also holds the client's own overhead
(the round trip, its reading), which one prompt length cannot tell from prefill: it is counted as
prefill, so calibrate on a prompt long enough that its prefill dwarfs a few milliseconds. Given
several runs of the same server (``fit([run_a, run_b])``) with two prompt lengths at C=1, a fourth
unknown, the overhead d0, joins the TTFT equations (TTFT = a + b + p I + d0) and is reported, not
predicted; the runs' different I also break the collinearity of b and p. With two prompt lengths
at C=1 the context term c (``step_per_context_token_ns``: step time per context token of a decoding
request, the KV cache it reads) is the slope of the C=1 decode step over the mean context I + N / 2:
no other prompt shares those steps, so their difference is the context's alone (fitted jointly with
the C > 1 stages, c took up their errors of the prefill share x); with one length it stays 0. A
memory-bound engine needs it: on llama.cpp on one CPU core a decode step at 1,100 tokens of
context costs ~25 % more than at 200. Stages flagged
server_over_capacity or with preemptions are left out of the fit (their figures are not the
engine's steady state) but get residuals like the rest; client_bound stages stay in (their medians
hold; their tails are the client's). Where the line a + b x batch misses a fitted decode step by
more than ``STEP_LINE_TOLERANCE`` (10 %) of it, the preset also carries the steps as measured
(``step_batch_ms``: each stage's d less its prompt and context shares, at its batch; the engine
interpolates between them, ``batch_knots``): llama.cpp on one CPU core steps 6.1, 12.2 and 14.3 ms
at batch 1, 2 and 4, which no line fits. KV capacity: the run's ``guard.capacity_tokens``;
max_running: the server's slots (llama.cpp) else at least the largest C; prefill chunk: llama.cpp's
default batch of 2048 tokens (``-b``: prompt tokens join the running decodes in one batch of at most
n_batch tokens), else at least I (the data cannot see chunking when a prompt fits in one chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SKIP_FLAGS = ("server_over_capacity",)
CONTEXT_MIN_EFFECT = 0.05  # the C=1 decode steps' relative difference below which c is taken as 0
MIN_STEP_BASE_MS = 0.001  # a fitted a of 0 (no fixed step cost seen) as the simulator's smallest step
LLAMACPP_N_BATCH = 2048  # llama-server's default -b: tokens (decode + prompt) in one step at most
RARE_PROMPTS = 0.1  # prompts per step below which a stage's median chunk gap is a step without a prompt
SERVER_PROMPT = "server prompt at C=1"  # the equation kind of the server's own prompt time (step_residuals)


class CalibrationError(ValueError):
    """The run cannot be calibrated: what is missing and what to run instead."""


@dataclass
class Fit:
    step_base_s: float
    step_per_seq_s: float
    step_per_prefill_token_s: float
    accept_length: float
    kv_tokens: int | None
    used_stages: list[int]  # concurrencies in the fit
    # per equation: input_tokens, concurrency, what (decode step | TTFT at C=1), batch, prefill_tokens
    # (x, or I for the TTFT), measured_s, model_s (the fitted right-hand side) and rel
    step_residuals: list[dict]
    client_overhead_s: float | None = None  # TTFT the engine does not see (two prompt lengths at C=1)
    step_per_context_token_s: float = 0.0  # per context token of a decoding request (two prompt lengths)
    step_per_prefill_pair_s: float = 0.0  # per (prompt token, earlier token of its sequence) (server prompt times)
    step_batch_s: list[tuple[float, float]] = field(default_factory=list)  # (batch, s) knots (``batch_knots``)

    def preset(self, summary: dict) -> dict:
        """The fit as simulator preset keys (``loadgen.sim.config.SimConfig`` names and units)."""
        sc, server = summary["scenario"], summary.get("server") or {}
        loads = [s["concurrency"] for s in summary["stages"] if s.get("concurrency")]
        flavor = server.get("flavor") if server.get("flavor") in ("vllm", "sglang") else "vllm"
        kv = self.kv_tokens or 10_000_000
        max_len = server.get("max_model_len") or max(32768, sc["input_tokens"] + sc["output_tokens"])
        return {
            "timing": "engine", "flavor": flavor, "model": summary.get("run", {}).get("model") or "calibrated",
            "max_model_len": int(min(max_len, kv - 16)), "kv_tokens": int(kv),
            "block_size": 1 if flavor == "sglang" else 16,
            "max_running": int(server.get("slots") or max(1024, *loads)), "max_queued": 0, "time_scale": 1,
            "seed": 0, "eos_prob": 0.0,
            "step_base_ms": max(round(self.step_base_s * 1e3, 6), MIN_STEP_BASE_MS), "step_per_seq_ms": round(self.step_per_seq_s * 1e3, 6),
            "step_per_prefill_token_us": round(self.step_per_prefill_token_s * 1e6, 6),
            "step_per_context_token_ns": round(self.step_per_context_token_s * 1e9, 6),
            "step_per_prefill_pair_ns": round(self.step_per_prefill_pair_s * 1e9, 6),
            "prefill_chunk_tokens": LLAMACPP_N_BATCH if server.get("flavor") == "llamacpp"
            else int(max(8192, sc["input_tokens"])),
            "spec_accept": accept_distribution(self.accept_length), "admit_output_reserve": 0.0,
            **({"step_batch_ms": [[round(b, 4), round(g * 1e3, 6)] for b, g in self.step_batch_s]}
               if self.step_batch_s else {}),
        }


STEP_LINE_TOLERANCE = 0.10  # the batch line may miss a fitted decode step by this much before knots replace it
# flavors whose /metrics say whether speculative decoding ran (loadgen.server.window_spec)
SPEC_REPORTING = ("vllm", "sglang", "llamacpp")


def stage_accept_length(row: dict, output_tokens: int) -> float:
    """A stage's tokens per engine step. The server's word first: when its /metrics were read in
    the window (``server.polls``) and its flavor reports speculative decoding (vLLM and llama.cpp
    with counters, SGLang with a gauge) but it reported none, 1: chunks of more than one token then
    come from the stream, not from a step (llama.cpp holds back a token that ends inside a UTF-8
    character and sends it with the next one: 1.01 tokens per chunk from a random-weight model, which
    read as speculation would draw 2-token steps that break up users the server keeps in lockstep).
    Otherwise L from tokens per chunk (``accept_length``)."""
    server = row.get("server") or {}
    if (server.get("polls") and not server.get("disabled") and server.get("flavor") in SPEC_REPORTING
            and not server.get("spec_accept_length")):
        return 1.0
    return accept_length(row.get("tokens_per_chunk"), output_tokens)


def accept_length(tokens_per_chunk: float | None, output_tokens: int) -> float:
    """L = (N - 1) / (N / tokens_per_chunk - 1); 1 when chunks carry one token (or nothing said)."""
    if not tokens_per_chunk or tokens_per_chunk <= 1.0001 or output_tokens < 2:
        return 1.0
    return (output_tokens - 1) / (output_tokens / tokens_per_chunk - 1)


def accept_distribution(mean: float) -> list[float]:
    """P(1, 2, ... K tokens per step) with this mean, as speculative decoding accepts drafts: each
    of the K - 1 drafted tokens is accepted with probability a until the first rejection, so
    P(k) = a^(k-1) (1 - a) for k < K and P(K) = a^(K-1), mean 1 + a + ... + a^(K-1), with the fewest
    drafts that reach the mean. Stage rows show only the mean; the spread comes from this model. It
    matters: it sets how much request lifetimes differ, and so how fast users that started together
    drift apart (the floor/ceil pair with the same mean made them drift ~3x slower than the hidden
    engine's; docs/whatif.md 'Why TTFT p50 is a draw at short windows')."""
    if mean <= 1.0001:
        return [1.0]
    k = int(mean) + 1  # the fewest K whose all-accepted mean (K) exceeds it
    lo, hi = 0.0, 1.0
    for _ in range(60):  # 1 + a + ... + a^(K-1) rises with a: bisection
        a = (lo + hi) / 2
        lo, hi = (a, hi) if sum(a ** j for j in range(k)) < mean else (lo, a)
    probs = [round(a ** (j - 1) * (1 - a), 6) for j in range(1, k)]
    return probs + [round(1.0 - sum(probs), 6)]


def _fit_rows(summary: dict) -> list[dict]:
    rows = [s for s in summary.get("stages") or [] if s.get("concurrency") and s.get("requests")
            and s.get("tpot_p50_s") and s.get("output_tokens_per_s")]
    if not rows:
        raise CalibrationError("no closed-loop stage with requests, TPOT and throughput in the run "
                               "(calibrate a concurrency sweep: stages.list with at least 3 stages)")
    return rows


def fit(summaries: dict | list[dict], max_batch: int | None = None) -> Fit:
    """The engine parameters of one run, or of several runs of the same server (module docstring).
    ``max_batch``: fit only the stages whose batch is at most this (the C=1 TTFTs stay in): a
    straight line in the batch, fitted over the batches a prediction will run, where the engine's
    step time is not linear over the whole range (llama.cpp on a CPU: 6, 13, 20 ms at 1, 2, 4)."""
    runs = [summaries] if isinstance(summaries, dict) else list(summaries)
    per_run = [(s, int(s["scenario"]["input_tokens"]), int(s["scenario"]["output_tokens"]), _fit_rows(s))
               for s in runs]
    lengths = [stage_accept_length(r, n_out) for _, _, n_out, rows in per_run for r in rows]
    weights = [r["requests"] for *_, rows in per_run for r in rows]
    accept = float(np.average(lengths, weights=weights))
    firsts = [(n_in, n_out, min(rows, key=lambda r: r["concurrency"])) for _, n_in, n_out, rows in per_run]
    firsts = [(n_in, n_out, r) for n_in, n_out, r in firsts if r["concurrency"] == 1 and r.get("ttft_p50_s")]
    overhead = len({n_in for n_in, _, _ in firsts}) >= 2  # two prompt lengths at C=1 separate it from prefill
    c = context_cost([(n_in + n_out / 2, r["tpot_p50_s"] * accept) for n_in, n_out, r in firsts])
    # the server's own prompt time at C=1 (llama.cpp's counters): a prompt step without the client's
    # overhead; at two prompt lengths it gives q, the cost of a prompt growing with its square
    prompts = [(n_in, _server_prompt_s(r, n_in)) for n_in, _, r in firsts if _server_prompt_s(r, n_in)]
    q = 0.0
    if len({n_in for n_in, _ in prompts}) >= 2:
        n_in, n_out, r = min(firsts, key=lambda f: f[0])  # the step's fixed part: the shortest run's C=1 decode step
        q = prompt_square_cost(prompts, r["tpot_p50_s"] * accept - c * (n_in + n_out / 2))
    eqs, targets, fitted, labels, known = [], [], [], [], []  # known: the context's and the square's shares
    for _, n_in, n_out, rows in per_run:
        good = [r for r in rows if not set(r.get("flags") or ()) & set(SKIP_FLAGS)
                and not (r.get("server") or {}).get("preemptions")] or rows
        for r in good:
            users = min(r["concurrency"], (r.get("server") or {}).get("running_max") or r["concurrency"])
            d, x, batch = decode_step(r, n_in, n_out, accept, users)
            if max_batch is not None and batch > max_batch:
                continue
            eqs.append([1.0, batch, x] + ([0.0] if overhead else []))
            targets.append(d)
            known.append(c * batch * (n_in + n_out / 2) + q * x * (n_in - 1) / 2)  # x tokens at mean position (I-1)/2
            fitted.append(int(r["concurrency"]))
            labels.append({"input_tokens": n_in, "concurrency": int(r["concurrency"]), "what": "decode step",
                           "batch": batch, "prefill_tokens": x})
    for n_in, _, r in firsts:
        eqs.append([1.0, 1.0, float(n_in)] + ([1.0] if overhead else []))
        targets.append(r["ttft_p50_s"])
        known.append(q * n_in * (n_in - 1) / 2)
        labels.append({"input_tokens": n_in, "concurrency": 1, "what": "TTFT at C=1", "batch": 1,
                       "prefill_tokens": n_in})
    for n_in, prompt_s in prompts if q else ():
        eqs.append([1.0, 1.0, float(n_in)] + ([0.0] if overhead else []))
        targets.append(prompt_s)
        known.append(q * n_in * (n_in - 1) / 2)
        labels.append({"input_tokens": n_in, "concurrency": 1, "what": SERVER_PROMPT, "batch": 1,
                       "prefill_tokens": n_in})
    a_mat, y, k = np.asarray(eqs), np.asarray(targets), np.asarray(known)
    scale = 1.0 / y  # relative errors: every equation counts alike whatever its size
    coef = _nonneg_lstsq(a_mat * scale[:, None], (y - k) * scale)
    resid = [float((np.asarray(e) @ coef + kk - t) / t) for e, t, kk in zip(eqs, targets, known, strict=True)]
    kv = (runs[0].get("guard") or {}).get("capacity_tokens")
    steps = [(lab["batch"], t - coef[2] * e[2] - kk, t) for lab, e, t, kk in zip(labels, eqs, targets, known, strict=True)
             if lab["what"] == "decode step"]
    return Fit(float(coef[0]), float(coef[1]), float(coef[2]), accept, kv, fitted,
               [dict(label, measured_s=t, model_s=float(np.asarray(e) @ coef + kk), rel=r)
                for label, e, t, kk, r in zip(labels, eqs, targets, known, resid, strict=True)],
               float(coef[3]) if overhead else None, c, q, batch_knots(steps, float(coef[0]), float(coef[1])))


def batch_knots(steps: list[tuple[float, float, float]], a: float, b: float) -> list[tuple[float, float]]:
    """The step's batch part as measured, where the straight line ``a + b x batch`` misses it.
    ``steps``: (batch, g, d) per fitted decode step, g = d less its prompt and context shares (what
    the line should give). When the line misses some g by more than ``STEP_LINE_TOLERANCE`` of its
    step d, the knots are the g's, stages of about the same batch (the same rounded batch) averaged:
    the engine then interpolates between them (``loadgen.engine_model.engine.batch_cost_s``). Else none: the
    line holds within what a TPOT moves between two runs. llama.cpp on a CPU: 6.1, 12.2, 14.3 ms at
    batch 1, 2, 4, which no line fits (the batch-2 step 22 % above it)."""
    if not steps or all(abs(a + b * x - g) <= STEP_LINE_TOLERANCE * d for x, g, d in steps):
        return []
    groups: dict[int, list[tuple[float, float]]] = {}
    for x, g, _ in steps:
        groups.setdefault(round(x), []).append((x, g))
    knots = [(float(np.mean([x for x, _ in v])), float(np.mean([g for _, g in v]))) for _, v in sorted(groups.items())]
    return knots if all(g > 0 for _, g in knots) else []


def cycle_steps(n_out: int, accept: float) -> float:
    """The engine steps of one closed-loop user's cycle while others keep the engine busy:
    n = 1 + (N - 1) / L with its request in the batch (its prefill step, then its decode steps),
    and one without: the successor, sent when the last chunk arrives, reaches the engine while the
    next step runs and joins the one after. n + 1."""
    return 2.0 + (n_out - 1) / accept


def occupied_batch(users: float, n_out: int, accept: float, median: bool = False) -> float:
    """The batch of a decoding request's step with ``users`` closed-loop users: itself, and each
    other user's request in the n of every n + 1 steps of its cycle (``cycle_steps``): on average
    1 + (users - 1) x n / (n + 1). ``median``: the batch of the median step (the step the median
    chunk gap is), 1 + the median of that binomial count, its mean rounded (at C = 4 and n = 44 most
    steps hold all four requests: 4, not the mean 3.93)."""
    cycle = cycle_steps(n_out, accept)
    others = (users - 1) * (cycle - 1.0) / cycle
    return 1.0 + (round(others) if median else others)


def decode_step(row: dict, n_in: int, n_out: int, accept: float, users: int | None = None) -> tuple[float, float, float]:
    """(d, x, batch): a stage's decode step, the prompt tokens it carries and the requests in it,
    for the equation d = a + b x batch + p x x. ``users``: the requests the server runs (C, or its
    running_max when it said less: the rest wait in its queue, and every step holds ``users``).

    Where prompts are rare (prompts per step = request rate x step < ``RARE_PROMPTS``), the median
    gap between a request's chunks, ``itl_chunk_p50_s``, is a step without one (x = 0, batch the
    median step's, ``occupied_batch``), whatever the users' phase. Else, or without that figure:
    d = TPOT p50 x L, x = request rate x (C - 1) / C x I x d (the other users' prompts spread evenly
    over a request's decode steps) and batch = ``occupied_batch``'s mean. That average fails where
    users that started together keep their prompts together: on llama.cpp at 512 prompt tokens and
    C = 4 the four prompts shared one batch and the TPOT held no prompt step (the TPOT-based d came
    out 27 % below the model's, the chunk gap is the step itself); with prompts in a third of the
    steps a cohort can also put one in every step of a short window, so the gap is used only well
    below half (``RARE_PROMPTS``)."""
    rate = row["output_tokens_per_s"] / n_out
    gap = row.get("itl_chunk_p50_s")
    c = row["concurrency"]
    users = c if users is None else users
    rare = bool(gap and rate * gap < RARE_PROMPTS)
    batch = occupied_batch(users, n_out, accept, median=rare) if c <= users else float(users)
    if rare:
        return gap, 0.0, batch
    d = row["tpot_p50_s"] * accept
    return d, rate * (c - 1) / c * n_in * d, batch


def prompt_square_cost(prompts: list[tuple[int, float]], fixed_s: float) -> float:
    """q from the server's own prompt times S at C=1 of two or more prompt lengths I: S(I) = fixed +
    p x I + q x I (I - 1) / 2, so the time per token beyond the step's fixed part, (S - fixed) / I =
    p + q x (I - 1) / 2, is a line in I whose slope is q / 2 (least squares, q >= 0). ``fixed_s``: the
    step without its prompt, a + b, read from the C=1 decode step (no other request in it)."""
    n = np.asarray([i for i, _ in prompts], dtype=float)
    per_token = np.asarray([(t - fixed_s) / i for i, t in prompts], dtype=float)
    return max(0.0, 2.0 * float(np.polyfit(n, per_token, 1)[0]))


def _server_prompt_s(row: dict, n_in: int) -> float | None:
    """The server's own time for one prompt at C=1: its mean prompt time per token (llama.cpp's
    counters, ``server.prompt_per_token.mean_s``) x I; None when the server did not report it."""
    mean = ((row.get("server") or {}).get("prompt_per_token") or {}).get("mean_s")
    return mean * n_in if mean else None


def context_cost(points: list[tuple[float, float]]) -> float:
    """c from the C=1 decode steps of runs with different prompt lengths: (mean context I + N / 2,
    decode step d) points, d = a + b + c x context, c = the least-squares slope (>= 0). No other
    request's prompt shares those steps, so their difference is the context's cost alone. 0 with
    fewer than two contexts, or when the steps differ by less than ``CONTEXT_MIN_EFFECT`` of the
    shortest context's (a TPOT p50 moves that much between two runs of the same stage, e.g. with
    speculative decoding's random accept lengths: such a slope is noise, and it would come out of b)."""
    ctx = np.asarray([p[0] for p in points], dtype=float)
    if len(set(ctx)) < 2:
        return 0.0
    d = np.asarray([p[1] for p in points], dtype=float)
    slope = float(np.polyfit(ctx, d, 1)[0])
    d_short = d[np.argmin(ctx)]
    if slope * (ctx.max() - ctx.min()) < CONTEXT_MIN_EFFECT * d_short:
        return 0.0
    return slope


def _nonneg_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative one and refit (4 unknowns)."""
    active = list(range(a.shape[1]))
    while True:
        coef = np.zeros(a.shape[1])
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        coef[active] = sol
        if (sol >= 0).all() or len(active) == 1:
            return np.maximum(coef, 0.0)
        active.pop(int(np.argmin(sol)))


def residuals(summary: dict, predicted_rows: list[dict]) -> list[dict]:
    """Per stage: measured, predicted and (predicted - measured) / measured of output tok/s, TTFT p50
    and TPOT p50; stages matched by concurrency."""
    by_c = {r["concurrency"]: r for r in predicted_rows}
    out = []
    for m in summary.get("stages") or []:
        p = by_c.get(m.get("concurrency"))
        if p is None or m.get("search"):
            continue
        row = {"concurrency": m["concurrency"], "flags": [f for f in m.get("flags") or [] if f in SKIP_FLAGS]}
        for key in ("output_tokens_per_s", "ttft_p50_s", "tpot_p50_s"):
            mv, pv = m.get(key), p.get(key)
            row[key] = {"measured": mv, "predicted": pv,
                        "rel": (pv - mv) / mv if mv and pv is not None else None}
        out.append(row)
    return out
