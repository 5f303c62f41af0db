"""The regression gate: two repeated sweeps (baseline, candidate) compared metric by metric.

Pure: no I/O, no clock. Input: two repeat.json dicts (``loadgen.repeat.summary``), which
keep every repetition's value. For each stage load present in both, each stage metric with at
least two values on each side gets Welch's t-test (``loadgen.repeat.stats.welch``); each finding
(knee, SLO maximum, KV-bounded maximum) the exact permutation test (``permutation_p``). The assessment:

- ``not distinguishable at 95 %`` when p >= 0.05 (or fewer than two repetitions on a side:
  ``too few repetitions``);
- else ``better`` or ``worse`` by the metric's direction (``direction``): throughputs, rates and
  the SLO attainment are better higher, times and prices better lower; for the rest (token
  lengths) the assessment says ``higher`` or ``lower``.

``--fail-on "output_tokens_per_s:-5%,ttft_p99_s:+10%"`` (``parse_fail_on``): a rule fails when, at
some stage (or for an finding), the change is significant at 95 % in the rule's direction AND the
change of the means, candidate / baseline - 1, is beyond the threshold (-5 %: a drop of more than
5 %). Significance alone would fail on a real 1 % change nobody cares about; the threshold alone
would fail on noise. A rule's sign must be the metric's worse direction (a drop in tok/s, a rise
in a latency). The command exits ``EXIT_REGRESSION`` when a rule fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.errors import ConfigError
from loadgen.repeat.stats import CONFIDENCE, permutation_p, present, welch
from loadgen.repeat.summary import FINDINGS
from loadgen.stats.metrics import STAGE_METRICS
from loadgen.stats.stage_load import RATE, load_number

METRICS = {m.key: m for m in STAGE_METRICS}
ANSWER_NAMES = dict(FINDINGS)
HIGHER_BETTER_UNITS = ("tok/s", "req/s")
LOWER_BETTER_UNITS = ("s",)
NOT_DISTINGUISHABLE = f"not distinguishable at {CONFIDENCE:.0%}"
TOO_FEW = "too few repetitions"


def direction(key: str) -> int:
    """+1 when higher is better, -1 when lower is better, 0 when neither (a length, a ratio of
    tokens). Findings (knee, SLO maximum, KV-bounded maximum) are better higher."""
    if key in ANSWER_NAMES or key == "slo_attainment":
        return 1
    if key.startswith("usd_"):
        return -1
    unit = METRICS[key].unit if key in METRICS else ""
    return 1 if unit in HIGHER_BETTER_UNITS else -1 if unit in LOWER_BETTER_UNITS else 0


@dataclass(frozen=True)
class Rule:
    """Fail when ``key`` changes by more than ``threshold`` (a fraction, signed: -0.05 = a 5 % drop)."""

    key: str
    threshold: float

    def beyond(self, change: float | None) -> bool:
        if change is None:
            return False
        return change < self.threshold if self.threshold < 0 else change > self.threshold


def parse_fail_on(text: str) -> tuple[Rule, ...]:
    """``KEY:+N%`` or ``KEY:-N%`` items, comma-separated; KEY a stage metric of summary.json or an
    finding (knee, slo_max, kv_max). Raises ConfigError naming the item and the fix."""
    rules = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, amount = item.partition(":")
        key, amount = key.strip(), amount.strip()
        if key not in METRICS and key not in ANSWER_NAMES:
            raise ConfigError("--fail-on", item, f"{key!r} is not a stage metric or an finding",
                              "use a summary.json stage key, e.g. output_tokens_per_s or ttft_p99_s, or "
                              f"one of {', '.join(ANSWER_NAMES)}")
        if not sep or not amount.endswith("%") or amount[:1] not in "+-":
            raise ConfigError("--fail-on", item, "needs a signed percentage after the colon",
                              f"e.g. {key}:{'-' if direction(key) >= 0 else '+'}5%")
        try:
            threshold = float(amount[:-1]) / 100.0
        except ValueError:
            raise ConfigError("--fail-on", item, "the percentage is not a number",
                              f"e.g. {key}:{amount[0]}5%") from None
        if threshold == 0 or (direction(key) and (threshold > 0) == (direction(key) > 0)):
            worse = "a drop" if direction(key) > 0 else "a rise"
            raise ConfigError("--fail-on", item, f"a regression of {key} is {worse}" if threshold else
                              "a 0 % threshold fails on any significant change",
                              f"e.g. {key}:{'-' if direction(key) >= 0 else '+'}5%")
        rules.append(Rule(key, threshold))
    if not rules:
        raise ConfigError("--fail-on", text, "names no rule", "e.g. --fail-on output_tokens_per_s:-5%")
    return tuple(rules)


@dataclass(frozen=True)
class MetricChange:
    """One metric (or finding) at one load (None for findings): means, relative change of the means
    (candidate / baseline - 1) with its 95 % interval, two-sided p, the assessment, and the rule it
    fails (None)."""

    load: float | None
    key: str
    base_mean: float | None
    cand_mean: float | None
    change: float | None
    change_low: float | None
    change_high: float | None
    p: float | None
    assessment: str
    failed: Rule | None = None

    def to_dict(self) -> dict:
        return {"load": self.load, "key": self.key, "baseline_mean": self.base_mean,
                "candidate_mean": self.cand_mean, "change": self.change, "change_low": self.change_low,
                "change_high": self.change_high, "p": self.p, "assessment": self.assessment,
                "failed_rule": None if self.failed is None else f"{self.failed.key}:{self.failed.threshold:+.0%}"}


def _word(key: str, diff: float, p: float | None) -> str:
    if p is None:
        return TOO_FEW
    if p >= 1.0 - CONFIDENCE:
        return NOT_DISTINGUISHABLE
    sense = direction(key) * (1 if diff > 0 else -1)
    return "better" if sense > 0 else "worse" if sense < 0 else ("higher" if diff > 0 else "lower")


def _failed(key: str, assessment: str, change: float | None, diff: float, rules: tuple[Rule, ...]) -> Rule | None:
    for rule in rules:
        significant = assessment not in (NOT_DISTINGUISHABLE, TOO_FEW) and (diff < 0) == (rule.threshold < 0)
        if rule.key == key and significant and rule.beyond(change):
            return rule
    return None


def metric_change(load: float | None, key: str, base: list, cand: list, rules: tuple[Rule, ...] = ()) -> MetricChange:
    """Welch's test of one stage metric (``key``) at ``load``; the findings' permutation test when
    ``key`` is an finding."""
    b, c = present(base), present(cand)
    bm = sum(b) / len(b) if b else None
    cm = sum(c) / len(c) if c else None
    change = cm / bm - 1.0 if bm and cm is not None else None
    if key in ANSWER_NAMES:
        p = permutation_p(b, c) if len(b) >= 2 and len(c) >= 2 else None
        low = high = None
    else:
        w = welch(b, c)
        p = None if w is None else w.p
        low, high = (w.low / bm, w.high / bm) if w is not None and bm else (None, None)
    diff = (cm or 0.0) - (bm or 0.0)
    assessment = _word(key, diff, p)
    return MetricChange(load, key, bm, cm, change, low, high, p, assessment, _failed(key, assessment, change, diff, rules))


def gate(base: dict, cand: dict, rules: tuple[Rule, ...] = ()) -> list[MetricChange]:
    """Every stage metric at every load both repeat.json have, then the findings. Raises ConfigError
    when one is a rate sweep and the other a concurrency sweep (no load of one matches the other)."""
    if base["load"] != cand["load"]:
        raise ConfigError("compare", f"{base['load']} vs {cand['load']}", "cannot gate a rate sweep against a "
                          "concurrency sweep", "repeat both in the same mode")
    out = []
    cand_stages = {s["load"]: s["metrics"] for s in cand["stages"]}
    for stage in base["stages"]:
        other = cand_stages.get(stage["load"])
        if other is None:
            continue
        for key, iv in stage["metrics"].items():
            if key in other:
                out.append(metric_change(stage["load"], key, iv["values"], other[key]["values"], rules))
    for key in ANSWER_NAMES:
        out.append(metric_change(None, key, base["findings"][key]["values"], cand["findings"][key]["values"], rules))
    return out


def regressions(changes: list[MetricChange]) -> list[MetricChange]:
    return [v for v in changes if v.failed is not None]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def format_gate(changes: list[MetricChange], rules: tuple[Rule, ...], load_key: str, shown: tuple[str, ...]) -> str:
    """The gate's text: one line per (load, metric) of ``shown`` and of the rules' keys, then the
    findings, then the rules' outcome."""
    keys = set(shown) | {r.key for r in rules}
    unit = " req/s" if load_key == RATE else ""
    lines = ["baseline -> candidate: change of the means [95 % interval], two-sided p, assessment"]
    for v in changes:
        if v.load is not None and v.key not in keys:
            continue
        where = f"{'C=' if load_key != RATE else ''}{load_number(v.load)}{unit}" if v.load is not None else "finding"
        span = f" [{_pct(v.change_low)}, {_pct(v.change_high)}]" if v.change_low is not None else ""
        p = "-" if v.p is None else f"{v.p:.3f}"
        mark = f"   FAIL {v.failed.key}:{v.failed.threshold:+.0%}" if v.failed else ""
        lines.append(f"{where:>12} {v.key:<28} {_pct(v.change):>7}{span:<19} p={p:<6} {v.assessment}{mark}")
    failed = regressions(changes)
    rules_text = ", ".join(f"{r.key}:{r.threshold:+.0%}" for r in rules) or "none (no --fail-on)"
    lines.append(f"gate: rules {rules_text}: " + (f"{len(failed)} regression(s) beyond the threshold" if failed
                                                   else "no regression beyond a threshold"))
    return "\n".join(lines)
