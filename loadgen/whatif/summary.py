"""A what-if sweep: a calibrated preset with changes -> the predicted summary (stages, knee, SLO, KV).

Pure: the preset arrives as a ``SimConfig``, the result is a summary.json-shaped dict; the command
line (``loadgen.whatif.__main__``) reads and writes the files. Everything it builds says it is
predicted: ``predicted`` at the top and on every row, the flag ``predicted``, and a note.

Replicas behind a round-robin router: each replica is its own engine (the preset's), and the
users (or the rate) are split evenly, the first ``C mod R`` replicas taking one user more; stage
throughput is the replicas' sum, latency figures are over the union of their requests. The KV
ceiling is the run's own (``loadgen.run.kv_guard.max_fitting_concurrency_of``: ``loadgen.workload.mix``
per request) over R x kv_tokens.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from dataclasses import dataclass, field

from loadgen.analysis.knee import find_knee, find_rate_knee
from loadgen.config import Scenario, StagesConfig, build_scenario
from loadgen.config.schema import LengthConfig
from loadgen.run.plan import TICK_S
from loadgen.run.results import GuardLog, RunFacts, build_summary
from loadgen.server.replies import Capacity
from loadgen.sim.config import SimConfig
from loadgen.slo.objectives import Objectives
from loadgen.stats.stage_stats import StageStats
from loadgen.whatif.rows import stage_row
from loadgen.whatif.virtual_sweep import ERROR_PAUSE_S, VirtualStage, run_sweep, stage_rules
from loadgen.whatif.virtual_workload import VirtualWorkload

NOTE = ("PREDICTED, not measured: every figure here comes from the simulator's engine calibrated to a "
        "measured run (llm-loadgen calibrate); confirm the one stage it suggests with a real run.")


@dataclass(frozen=True)
class WhatIf:
    """The workload and load to predict (the changes already applied to the preset)."""

    input_tokens: int = 1000
    output_tokens: int = 1000
    loads: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    open_loop: bool = False
    replicas: int = 1
    stages: StagesConfig = field(default_factory=stage_rules)  # the scenario's stages section: the plan's rules
    objectives: Objectives = field(default_factory=Objectives)
    knee_threshold: float = 0.10
    spread: int = 0  # extra runs with other seeds, engine speeds and client jitters: how sure the prediction is
    # what each request asks for and when open-loop requests arrive; None: input_tokens / output_tokens
    # fixed, constant gaps (loadgen.whatif.virtual_workload)
    workload: VirtualWorkload | None = None
    scenario: dict | None = None  # the scenario file predicted (Scenario.to_dict()), for the summary
    tick_s: float = TICK_S  # how often the plan is ticked (the run's loadgen.run.plan.TICK_S; 0: after every engine step)
    client_error_pause_s: float = ERROR_PAUSE_S  # request.client_error_pause_s

    @property
    def requests(self) -> VirtualWorkload:
        return self.workload or VirtualWorkload.fixed(self.input_tokens, self.output_tokens)

    def run_scenario(self) -> Scenario:
        """The scenario the run would run: the file's (``scenario``), else the defaults with this
        what-if's lengths, loads, stage rules, objectives and knee threshold."""
        if self.scenario is not None:
            return build_scenario(self.scenario)
        base, wl = build_scenario({}), self.requests

        def length(d) -> LengthConfig:
            return LengthConfig(d.kind, d.mean, d.std, d.min, d.max)

        loads = tuple(self.loads)
        return dataclasses.replace(
            base, input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            input=length(wl.inputs), output=length(wl.outputs),
            stages=dataclasses.replace(self.stages, list=None if self.open_loop else loads),
            rate=dataclasses.replace(base.rate, list=loads if self.open_loop else None), slo=self.objectives,
            knee=dataclasses.replace(base.knee, threshold=self.knee_threshold))


def _split(load: float, replicas: int, open_loop: bool) -> list[float]:
    if open_loop:
        return [load / replicas] * replicas
    c = int(load)
    return [c // replicas + (1 if i < c % replicas else 0) for i in range(replicas)]


def _merge(parts: list[VirtualStage]) -> VirtualStage:
    """One stage over the replicas: requests pooled, throughput summed (each over its own window)."""
    live = [p for p in parts if p.window_s]
    window = max((p.window_s for p in live), default=0.0)
    first = parts[0]
    rec = VirtualStage(first.index, None if first.concurrency is None else sum(p.concurrency for p in parts),
                      None if first.rate_per_s is None else sum(p.rate_per_s for p in parts), 0.0, window,
                      search=first.search, early=first.early)
    rec.window_tokens = round(sum(p.window_tokens / p.window_s for p in live) * window)
    rec.window_finished = round(sum(p.window_finished / p.window_s for p in live) * window)
    for name in dict.fromkeys(name for p in parts for name in p.models):  # each model's part, merged the same way
        part = rec.model(name)
        part.window_tokens = round(sum(p.model(name).window_tokens / p.window_s for p in live) * window)
        part.window_finished = round(sum(p.model(name).window_finished / p.window_s for p in live) * window)
        for p in parts:
            part.stats.merge(p.model(name).stats)
    for p in parts:
        rec.stats.merge(p.stats)  # exact, as the master merges its workers' (loadgen.stats.stage_stats)
        rec.requests += p.requests
        rec.preemptions += p.preemptions
        rec.scheduled, rec.dropped = rec.scheduled + p.scheduled, rec.dropped + p.dropped
        rec.peak_running, rec.peak_waiting = max(rec.peak_running, p.peak_running), max(rec.peak_waiting, p.peak_waiting)
        rec.peak_kv_tokens = max(rec.peak_kv_tokens, p.peak_kv_tokens)
    return rec


SPREAD_JITTER_S = 0.002  # the client turnaround of the spread runs: a few ms, as a real client's


def predict(cfg: SimConfig, w: WhatIf) -> dict:
    """The predicted summary (summary.json's shape, ``predicted: true`` everywhere).

    With ``w.spread`` = K, K more runs with other engine seeds (speculative accept draws), the
    engine's speed moved by a seeded factor within 1 +- SPREAD_SPEED (``_reseeded``) and a seeded
    0-2 ms client jitter play the same sweep: where users that start together form a cohort,
    which phase of it a window catches is a draw, and so are figures such as TTFT p50 that take a
    few discrete levels (a prompt's prefill alone, or behind one or two others'). Then, per row and
    for output tok/s, TTFT p50 and TPOT p50: the figure is the median over the K + 1 runs (the lower
    middle one: a value some run gave), ``spread`` its [min, max] and ``spread_runs`` every run's
    value, sorted; the other figures, the knee and the SLO answer are the first run's. A stage is
    matched by its load (an SLO search may measure other loads in another run: those are left out)."""
    summary = _predict_once(cfg, w, 0.0)
    if w.spread:
        load_key = "offered_rate_per_s" if w.open_loop else "concurrency"
        others = [{r[load_key]: r for r in _predict_once(_reseeded(cfg, k), w, SPREAD_JITTER_S)["stages"]}
                  for k in range(1, w.spread + 1)]
        for row in summary["stages"]:
            rows = [row] + [o[row[load_key]] for o in others if row[load_key] in o]
            values = {key: sorted(r[key] for r in rows if r.get(key) is not None) for key in SPREAD_KEYS}
            row["spread"] = {key: [v[0], v[-1]] if v else None for key, v in values.items()}
            row["spread_runs"] = values
            for key, v in values.items():
                if v:
                    row[key] = statistics.median_low(v)
        if (c := summary["confirm"]) is not None:
            row = next(r for r in summary["stages"] if r.get(load_key) == c["load"])
            c.update({k: row[k] for k in SPREAD_KEYS})
    return summary


SPREAD_KEYS = ("output_tokens_per_s", "ttft_p50_s", "tpot_p50_s")


SPREAD_SPEED = 0.03  # the spread runs' engine speed: each run's step costs x a seeded 1 +- this
STEP_COSTS = ("step_base_ms", "step_per_seq_ms", "step_per_prefill_token_us", "step_per_context_token_ns",
              "step_per_prefill_pair_ns")


def _reseeded(cfg: SimConfig, k: int) -> SimConfig:
    """Spread run k: another engine seed, and every step cost scaled by one factor drawn uniformly
    from 1 +- SPREAD_SPEED. The same server ran 3-8 % faster or slower between two runs of the
    llama.cpp bench (docs/whatif.md 'Against llama.cpp'), and over a stage's tens of request cycles
    that much moves where the running users stand when the next stage's users start: whether a new
    user's prompt lands beside another's, which decides a locked cohort's TTFT levels. Without it a
    server with no speculative decoding has no draw left and every spread run plays the same phase."""
    factor = 1.0 + random.Random(cfg.seed * 1_000_003 + k).uniform(-SPREAD_SPEED, SPREAD_SPEED)
    return dataclasses.replace(cfg, seed=cfg.seed + k, **{key: getattr(cfg, key) * factor for key in STEP_COSTS},
                               step_batch_ms=[[b, ms * factor] for b, ms in cfg.step_batch_ms])


def _predict_once(cfg: SimConfig, w: WhatIf, jitter_s: float) -> dict:
    params = cfg.engine_params()
    lanes = list(zip(*[_split(x, w.replicas, w.open_loop) for x in w.loads], strict=True))
    wl = w.requests
    cache: dict[tuple, list[VirtualStage]] = {}
    per_lane = []
    for part, lane in enumerate(lanes):
        # replicas with the same load play the same sweep unless their draws differ (their own streams)
        key = (tuple(lane), part if wl.varied or w.open_loop else 0)
        if key not in cache:
            cache[key] = _lane(params, list(lane), w, jitter_s, part, cfg.max_model_len)
        per_lane.append(cache[key])
    # each replica's plan searches on its own share (the same draws: the same stages); the stages all ran
    records = [_merge([lane[k] for lane in per_lane]) for k in range(min(map(len, per_lane)))]
    for rec, load in zip(records, w.loads, strict=False):  # the stage's own load, not the lanes' sum of 0s
        if w.open_loop:
            rec.rate_per_s = float(load)
        else:
            rec.concurrency = int(load)
    mix = w.workload.model_mix.names if w.workload is not None and w.workload.model_mix is not None else ()
    rows = [stage_row(r, cfg.kv_tokens, w.objectives, mix) for r in records]  # KV use per replica
    knee = find_rate_knee(rows, w.knee_threshold) if w.open_loop else find_knee(rows, w.knee_threshold)
    return _summary(cfg, w, records, rows, knee)


PREDICTED_CAPACITY = "predicted: preset kv_tokens x replicas"


def _summary(cfg: SimConfig, w: WhatIf, records: list[VirtualStage], rows: list[dict], knee) -> dict:
    """The run's own summary.json (``loadgen.run.results.build_summary``) of the predicted stages,
    marked predicted (``predicted`` at the top and on ``run`` and ``server``), with what a what-if
    adds: what was predicted of the scenario, the stage to confirm and the notes."""
    wl, sc = w.requests, w.run_scenario()
    kv_total = cfg.kv_tokens * w.replicas
    name = f"{w.input_tokens}-{w.output_tokens}" if not wl.varied else (w.scenario or {}).get("name", "mixed")
    run = RunFacts(None, None, None, cfg.model, sc.endpoint, 0, None, w.replicas, [],
                   f"predicted_{cfg.model}_{name}_x{w.replicas}")
    capacity = Capacity(kv_total, PREDICTED_CAPACITY, cfg.flavor, cfg.max_model_len, "the preset's kv_tokens")
    totals = StageStats()  # the measured requests of every stage (warmup requests are not counted)
    for rec in records:
        totals.merge(rec.stats)
    summary = build_summary(run, sc, capacity, GuardLog(), rows, knee, totals, dataset=list(wl.dataset) or None)
    summary["predicted"] = summary["run"]["predicted"] = summary["server"]["predicted"] = True
    summary["scenario"].update(_predicted_of(w, wl))
    summary["guard"]["per_request_tokens"] = "loadgen.workload.mix: mean + 2.326 x std / sqrt(C), at most the longest"
    summary["confirm"] = confirm_stage(summary["stages"], knee, summary["slo"], summary["guard"]["max_concurrency"],
                                       w.open_loop)
    summary["notes"] = [NOTE]
    return summary


def _predicted_of(w: WhatIf, wl: VirtualWorkload) -> dict:
    """What summary.json's ``scenario`` adds in a what-if: the workload and plan predicted."""
    return {"replicas": w.replicas, "open_loop": w.open_loop, "predicted_workload": wl.describe(),
            "plan": {**dataclasses.asdict(w.stages), "tick_s": w.tick_s}}


def _lane(params, loads: list[float], w: WhatIf, jitter_s: float, part: int = 0,
          max_model_len: int | None = None) -> list[VirtualStage]:
    """One replica's sweep, played by the run's plan; a replica with no users in a stage records an
    empty stage; the SLO search's stages (judged on the replica's own requests) come after the listed ones."""
    busy = [k for k, x in enumerate(loads) if x > 0]

    def judge(rec: VirtualStage) -> bool | None:
        slo = stage_row(rec, params.kv_tokens, w.objectives).get("slo")
        return None if slo is None or slo["attainment"] is None else slo["pass"]

    recs = run_sweep(params, [loads[k] for k in busy], w.input_tokens, w.output_tokens, w.stages, w.objectives,
                     w.open_loop, jitter_s, w.requests, part, w.replicas, max_model_len, w.tick_s,
                     w.client_error_pause_s, judge if w.objectives.enabled else None)
    out = [VirtualStage(k, 0 if not w.open_loop else None, None if not w.open_loop else 0.0) for k in range(len(loads))]
    for k, rec in zip(busy, recs, strict=False):
        rec.index = k
        out[k] = rec
    for j, rec in enumerate(recs[len(busy):]):  # search stages
        rec.index = len(loads) + j
        out.append(rec)
    return out


def confirm_stage(rows: list[dict], knee, slo: dict | None, ceiling: int, open_loop: bool) -> dict | None:
    """The one real stage worth running to confirm the prediction: the SLO maximum when objectives
    are set (the answer a capacity planner acts on), else the knee, else the largest stage under the
    KV ceiling. Its predicted throughput and TTFT p50 are what the real stage should show."""
    key = "offered_rate_per_s" if open_loop else "concurrency"
    target, why = None, None
    if slo is not None and slo.get("max_concurrency") is not None:
        target, why = slo["max_concurrency"], "the predicted SLO maximum"
    elif knee is not None:
        target, why = knee, "the predicted knee"
    else:
        fits = [r[key] for r in rows if r.get(key) and (open_loop or r[key] <= ceiling)]
        if fits:
            target, why = max(fits), "the largest stage predicted to fit the KV cache"
    row = next((r for r in rows if r.get(key) == target), None)
    if row is None:
        return None
    return {"load": target, "open_loop": open_loop, "why": why,
            "output_tokens_per_s": row["output_tokens_per_s"], "ttft_p50_s": row["ttft_p50_s"],
            "tpot_p50_s": row["tpot_p50_s"]}
