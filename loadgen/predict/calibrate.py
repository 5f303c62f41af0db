"""Fit the simulator's engine to a measured sweep: summary.json's stage rows -> an engine preset.

Pure (the summary is passed in; ``loadgen.predict.__main__`` reads and writes the files). The model
is the engine's own (``loadgen.sim.engine``): one step = a + b x batch + p x prefill tokens in the
step, each decode step emitting L tokens per running request on average. Linear in the batch
because a decode step's cost is the weights' read (a) plus per-sequence attention and sampling (b);
a context-length term is left out: a sweep of fixed lengths cannot tell it from b.

From each closed-loop stage at concurrency C with N output and I input tokens per request:

- L = (N - 1) / (N / tokens_per_chunk - 1)  (a request's first token comes from its prefill step
  alone, so an N-token output takes 1 + (N - 1) / L chunks); 1 without speculative decoding
- decode step time d = TPOT p50 x L
- prefill tokens per step x = request rate x I x d, request rate = output tok/s / N
- batch = C (every user's request is in the engine; the server's running_max when it said less)

and least squares on relative errors of

    d_k = a + b x batch_k + p x x_k       (each fitted stage)
    TTFT(C=1) = a + b + p x I             (the lowest stage at C=1: an idle engine, one step)

With fixed lengths x_k is nearly proportional to C (x ~ C x I x L / N), so the decode equations
fix a and b + p I L / N; the C=1 TTFT separates p. That TTFT also holds the client's own overhead
(the round trip, its reading), which one prompt length cannot tell from prefill: it is counted as
prefill, so calibrate on a prompt long enough that its prefill dwarfs a few milliseconds. Given
several runs of the same server (``fit([run_a, run_b])``) with two prompt lengths at C=1, a fourth
unknown, the overhead d0, joins the TTFT equations (TTFT = a + b + p I + d0) and is reported, not
predicted; the runs' different I also break the collinearity of b and p. Stages flagged
server_over_capacity or with preemptions are left out of the fit (their figures are not the
engine's steady state) but get residuals like the rest; client_bound stages stay in (their medians
hold; their tails are the client's). KV capacity: the run's ``guard.capacity_tokens``;
max_running: the server's slots (llama.cpp) else at least the largest C; prefill chunk: at least I
(the data cannot see chunking when a prompt fits in one chunk).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SKIP_FLAGS = ("server_over_capacity",)


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
            "step_base_ms": round(self.step_base_s * 1e3, 6), "step_per_seq_ms": round(self.step_per_seq_s * 1e3, 6),
            "step_per_prefill_token_us": round(self.step_per_prefill_token_s * 1e6, 6),
            "prefill_chunk_tokens": int(max(8192, sc["input_tokens"])),
            "spec_accept": accept_distribution(self.accept_length), "admit_output_reserve": 0.0,
        }


def accept_length(tokens_per_chunk: float | None, output_tokens: int) -> float:
    """L = (N - 1) / (N / tokens_per_chunk - 1); 1 when chunks carry one token (or nothing said)."""
    if not tokens_per_chunk or tokens_per_chunk <= 1.0001 or output_tokens < 2:
        return 1.0
    return (output_tokens - 1) / (output_tokens / tokens_per_chunk - 1)


def accept_distribution(mean: float) -> list[float]:
    """P(1, 2, ... tokens per step) with this mean: all mass on floor and ceil (only the mean is
    seen in stage rows, so the spread is the least the mean allows)."""
    if mean <= 1.0001:
        return [1.0]
    lo = int(mean)
    frac = round(mean - lo, 6)
    probs = [0.0] * (lo + (1 if frac > 0 else 0))
    probs[lo - 1] = round(1 - frac, 6)
    if frac > 0:
        probs[lo] = frac
    return probs


def _fit_rows(summary: dict) -> list[dict]:
    rows = [s for s in summary.get("stages") or [] if s.get("concurrency") and s.get("requests")
            and s.get("tpot_p50_s") and s.get("output_tokens_per_s")]
    if not rows:
        raise CalibrationError("no closed-loop stage with requests, TPOT and throughput in the run "
                               "(calibrate a concurrency sweep: stages.list with at least 3 stages)")
    return rows


def fit(summaries: dict | list[dict]) -> Fit:
    """The engine parameters of one run, or of several runs of the same server (module docstring)."""
    runs = [summaries] if isinstance(summaries, dict) else list(summaries)
    per_run = [(s, int(s["scenario"]["input_tokens"]), int(s["scenario"]["output_tokens"]), _fit_rows(s))
               for s in runs]
    lengths = [accept_length(r.get("tokens_per_chunk"), n_out) for _, _, n_out, rows in per_run for r in rows]
    weights = [r["requests"] for *_, rows in per_run for r in rows]
    accept = float(np.average(lengths, weights=weights))
    firsts = [(n_in, min(rows, key=lambda r: r["concurrency"])) for _, n_in, _, rows in per_run]
    firsts = [(n_in, r) for n_in, r in firsts if r["concurrency"] == 1 and r.get("ttft_p50_s")]
    overhead = len({n_in for n_in, _ in firsts}) >= 2  # two prompt lengths at C=1 separate it from prefill
    eqs, targets, fitted, labels = [], [], [], []
    for _, n_in, n_out, rows in per_run:
        good = [r for r in rows if not set(r.get("flags") or ()) & set(SKIP_FLAGS)
                and not (r.get("server") or {}).get("preemptions")] or rows
        for r in good:
            batch = min(r["concurrency"], (r.get("server") or {}).get("running_max") or r["concurrency"])
            d = r["tpot_p50_s"] * accept
            x = r["output_tokens_per_s"] / n_out * n_in * d
            eqs.append([1.0, batch, x] + ([0.0] if overhead else []))
            targets.append(d)
            fitted.append(int(r["concurrency"]))
            labels.append({"input_tokens": n_in, "concurrency": int(r["concurrency"]), "what": "decode step",
                           "batch": batch, "prefill_tokens": x})
    for n_in, r in firsts:
        eqs.append([1.0, 1.0, float(n_in)] + ([1.0] if overhead else []))
        targets.append(r["ttft_p50_s"])
        labels.append({"input_tokens": n_in, "concurrency": 1, "what": "TTFT at C=1", "batch": 1,
                       "prefill_tokens": n_in})
    a_mat, y = np.asarray(eqs), np.asarray(targets)
    scale = 1.0 / y  # relative errors: every equation counts alike whatever its size
    coef = _nonneg_lstsq(a_mat * scale[:, None], y * scale)
    resid = [float((np.asarray(e) @ coef - t) / t) for e, t in zip(eqs, targets, strict=True)]
    kv = (runs[0].get("guard") or {}).get("capacity_tokens")
    return Fit(float(coef[0]), float(coef[1]), float(coef[2]), accept, kv, fitted,
               [dict(label, measured_s=t, model_s=float(np.asarray(e) @ coef), rel=r)
                for label, e, t, r in zip(labels, eqs, targets, resid, strict=True)],
               float(coef[3]) if overhead else None)


def _nonneg_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative one and refit (3 unknowns)."""
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
