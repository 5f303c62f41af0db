"""The summary of a repeated sweep (``llm-loadgen --repeat N``): repeat.json and its console lines.

Pure: no I/O, no clock. Input: each repetition's summary.json (in order) and what the command
knows about it (folder, seeds, exit code). Output, ``repeat_summary``:

    {"schema": REPEAT_SCHEMA, "load": "concurrency" | "offered_rate_per_s", "confidence": 0.95,
     "slo_asked": whether the runs had SLO objectives, "method": {...: how each interval is made, in words},
     "repetitions": [{"index", "folder", "prompt_seed", "arrival_seed", "exit_code", "findings"}],
     "stages": [{"load": C or req/s, "metrics": {key: Interval.to_dict() + {"values": [per rep]}}}],
     "findings": {"knee" | "slo_max" | "kv_max": Interval.to_dict() + {"values": [...]}}}

Stages are matched across repetitions by the load they were asked (``planned_load``); an SLO
search stage's load may appear in some repetitions only (its intervals then say n of N). The
per-repetition values stay in the file, so ``report compare`` (``loadgen.repeat.gate``) tests two
repeat folders from their repeat.json alone. Methods: ``loadgen.repeat.stats``.
"""

from __future__ import annotations

from loadgen.analysis.knee import knee_of
from loadgen.repeat.stats import CONFIDENCE, Interval, finding_interval, mean_interval
from loadgen.stats.metrics import STAGE_METRICS
from loadgen.stats.stage_load import CONCURRENCY, RATE, is_rate_run, load_label, load_number, planned_load

REPEAT_SCHEMA = "llm-loadgen-repeat/2"
OLD_SCHEMAS = ("llm-loadgen-repeat/1",)  # read too: their "answers" are the "findings"
REPEAT_FILE = "repeat.json"
FINDINGS = (  # (key, the console's name)
    ("knee", "knee"),
    ("slo_max", "SLO maximum"),
    ("kv_max", "KV-bounded maximum"),
)
METHOD = {
    "stage_metrics": "mean over repetitions, 95 % Student t interval: mean +- t(0.975, n-1) x sd / sqrt(n)",
    "findings": "median over repetitions; interval: order statistics (x_(j), x_(n+1-j)) for the median with the "
               "largest j of confidence >= 95 %, else (n < 6) the range of the findings with its confidence "
               "1 - 2^(1-n) stated",
    "seeds": "repetition k (0-based) runs with prompt seed S + k and arrival seed A + k (S: --seed, default 0; "
             "A: --arrival-seed, default S)",
}


def findings_of(summary: dict) -> dict:
    """A run's three findings: the knee (C, or req/s), the SLO maximum (summary ``slo.max_concurrency``:
    a C, or a rate in an open-loop run), the KV-bounded maximum (``guard.max_concurrency``)."""
    return {
        "knee": knee_of(summary),
        "slo_max": (summary.get("slo") or {}).get("max_concurrency"),
        "kv_max": (summary.get("guard") or {}).get("max_concurrency"),
    }


def _with_values(interval: Interval, values: list) -> dict:
    return {**interval.to_dict(), "values": list(values)}


def stage_intervals(summaries: list[dict]) -> list[dict]:
    """Per load asked (sorted), every stage metric's values over the repetitions (None where a
    repetition has no such stage or figure) and their ``mean_interval``."""
    tables = [{planned_load(s): s for s in summary.get("stages") or [] if planned_load(s) is not None}
              for summary in summaries]
    out = []
    for load in sorted({x for t in tables for x in t}):
        metrics = {}
        for m in STAGE_METRICS:
            values = [t[load].get(m.key) if load in t else None for t in tables]
            if any(v is not None for v in values):
                metrics[m.key] = _with_values(mean_interval(values), values)
        out.append({"load": load, "metrics": metrics})
    return out


def repeat_summary(summaries: list[dict], repetitions: list[dict]) -> dict:
    """repeat.json (module docstring). ``repetitions[k]``: {"folder", "prompt_seed",
    "arrival_seed", "exit_code"} of repetition k, in the order of ``summaries``."""
    findings = [findings_of(s) for s in summaries]
    rate = bool(summaries) and is_rate_run(summaries[0])
    return {
        "schema": REPEAT_SCHEMA,
        "load": RATE if rate else CONCURRENCY,
        "confidence": CONFIDENCE,
        "slo_asked": any(s.get("slo") for s in summaries),
        "method": dict(METHOD),
        "repetitions": [{"index": k + 1, **rep, "findings": a}
                        for k, (rep, a) in enumerate(zip(repetitions, findings, strict=True))],
        "stages": stage_intervals(summaries),
        "findings": {key: _with_values(finding_interval([a[key] for a in findings]), [a[key] for a in findings])
                    for key, _ in FINDINGS},
    }


def finding_text(interval: dict, rate: bool) -> str:
    """``C=56 (48–64, 95 %)``; with fewer than 6 findings the range and its own confidence:
    ``C=64 (48–64, 75 %: the range of 3)``; ``not found in any of 3`` / ``(found in 2 of 3)``."""
    if interval["mid"] is None:
        return f"none (not found in any of {interval['of']} repetitions)"
    text = load_label(interval["mid"], rate)
    unit = " req/s" if rate else ""
    if interval["low"] is not None:
        span = f"{load_number(interval['low'])}–{load_number(interval['high'])}{unit}"
        level = f"{interval['confidence'] * 100:.0f} %"
        ranged = f": the range of {interval['n']}" if interval["n"] < 6 else ""
        text += f" ({span}, {level}{ranged})"
    if interval["n"] < interval["of"]:
        text += f" (found in {interval['n']} of {interval['of']} repetitions)"
    return text


def finding_lines(repeat: dict) -> list[str]:
    """The console's lines on the findings, e.g. ``knee C=56 (48–64, 95 %)`` (no SLO line when the
    runs had no SLO objectives). The KV-bounded maximum is a concurrency in a rate sweep too
    (``guard.max_concurrency``)."""
    rate = repeat["load"] == RATE
    return [f"{name:<19} {finding_text(repeat['findings'][key], rate and key != 'kv_max')}" for key, name in FINDINGS
            if key != "slo_max" or repeat.get("slo_asked", True)]


SHOWN = ("output_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s")


def format_repeat_table(repeat: dict) -> str:
    """Per stage: mean and 95 % interval (``mean [low, high]``) of the ``SHOWN`` metrics, then the
    findings' lines."""
    rate = repeat["load"] == RATE
    n = len(repeat["repetitions"])
    by_key = {m.key: m for m in STAGE_METRICS}
    head = f"{'rate' if rate else 'C':>6}  n " + "".join(f" | {by_key[k].title + ' mean [95 %]':^30}" for k in SHOWN)
    lines = [f"{n} repetitions; per stage: mean [95 % Student t interval]", head]
    for stage in repeat["stages"]:
        cells = []
        for key in SHOWN:
            iv = stage["metrics"].get(key)
            if iv is None or iv["mid"] is None:
                cells.append(f"{'-':^30}")
                continue
            m = by_key[key]
            span = "" if iv["low"] is None else f" [{m.text(iv['low'])}, {m.text(iv['high'])}]"
            cells.append(f"{m.text(iv['mid']) + span:^30}")
        count = max((iv["n"] for iv in stage["metrics"].values()), default=0)
        lines.append(f"{stage['load']:>6g} {count:>2} " + "".join(f" | {c}" for c in cells))
    return "\n".join(lines + finding_lines(repeat))


def upgraded(repeat: dict) -> dict:
    """A repeat.json of an older schema (``OLD_SCHEMAS``) as the current one reads: schema 1 called
    the findings "answers" (top level and per repetition). Others are returned as they are."""
    if repeat.get("schema") not in OLD_SCHEMAS:
        return repeat
    out = {**repeat, "schema": REPEAT_SCHEMA, "findings": repeat.get("answers", {})}
    out.pop("answers", None)
    out["repetitions"] = [{**{k: v for k, v in r.items() if k != "answers"}, "findings": r.get("answers")}
                          for r in repeat.get("repetitions", [])]
    return out
