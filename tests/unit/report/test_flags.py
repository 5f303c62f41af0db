"""Stage flags: one declaration (loadgen/stats/flags.py); console legend, report.html and docs/sweep.md derive from it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from loadgen.analysis.knee import knee_of
from loadgen.report.html import render_report_html
from loadgen.report.table import format_stage_table, stage_flags
from loadgen.run.kv_guard import decide
from loadgen.run.results import GuardLog, StageInfo, stage_row
from loadgen.stats.flags import FLAG_KEYS, FLAGS, cut_flag, flags_in, legend_lines, meaning

ROOT = Path(__file__).resolve().parents[3]
CLIENT = {"cpu_percent": 95.0, "loop_lag_p99_s": 0.03}


def test_each_flag_is_declared_once_with_a_one_line_meaning():
    keys = [f.key for f in FLAGS]
    assert len(keys) == len(set(keys)) == len(FLAG_KEYS)
    for f in FLAGS:
        assert re.fullmatch(r"[a-z_]+", f.key)
        assert "\n" not in f.meaning and 20 < len(f.meaning) <= 160, f.key


def test_every_flag_a_row_can_get_is_declared():
    guard = GuardLog()
    guard.record(decide(8, 10_000, 1000, 1000, 0.0, "clamp"))  # clamped to 5
    guard.record(decide(6, 10_000, 1000, 1000, 0.0, "warn"))
    info = StageInfo(0, 5, window_s=1.0, users=4, server={"over_capacity": True, "server_restarted": True})
    info.add_lost(1)
    seen = set(stage_row(info, None, guard, CLIENT, client_bound=True, unfinished=1)["flags"])
    seen |= set(stage_row(StageInfo(1, 6, window_s=1.0, users=6), None, guard, CLIENT, False, 1,
                          cut_flag("interrupted"))["flags"])
    from loadgen.slo.early import EarlyVerdict
    from loadgen.slo.objectives import Objectives

    # no request met the objective, and the window closed early on that
    searched = StageInfo(2, 7, window_s=1.0, users=7, search=True, early=EarlyVerdict("fail", 0.95, (), 7))
    seen |= set(stage_row(searched, None, guard, CLIENT, False, objectives=Objectives(ttft_s=1.0))["flags"])
    seen |= {cut_flag("error"), cut_flag("guard_abort"), "knee"}
    from loadgen.stats.stage_stats import StageStats

    late = StageStats()
    late.ttft_s.add(0.5)  # the client saw its first token 400 ms after the server's clock says it left
    server = {"ttft": {"count": 1, "mean_s": 0.1, "p50_s": 0.1, "p90_s": 0.1, "p99_s": 0.1}}
    seen |= set(stage_row(StageInfo(3, 1, window_s=1.0, users=1, server=server), late, guard, CLIENT, False)["flags"])
    from loadgen.whatif.rows import stage_row as predicted_row
    from loadgen.whatif.virtual_sweep import VirtualStage

    seen |= set(predicted_row(VirtualStage(3, 8, None, window_s=1.0, warmup_capped=True), 1000)["flags"])  # what-if rows
    from loadgen.stats.drift import attach

    seen |= set(attach({"flags": []}, {"drift": True})["flags"])  # a soak stage whose figures moved
    from loadgen.stats.replicas import judge

    rows = {"a": {"requests": 30, "ttft_p50_s": 0.1}, "b": {"requests": 10, "ttft_p50_s": 0.1},
            "c": {"requests": 10, "ttft_p50_s": 0.5}}  # a took 1.8 x its share, c starts 5 x slower
    seen |= set(judge(rows, ("a", "b", "c"), 1.5, 2.0)[1])
    assert seen == FLAG_KEYS


def test_no_module_appends_an_undeclared_flag_literal():
    """Any ``<x>.flags.append("...")`` / ``flags.append("...")`` literal in the package is declared."""
    found = set()
    for path in (ROOT / "loadgen").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                    and "flags" in ast.unparse(node.func.value) and node.args
                    and isinstance(node.args[0], ast.Constant)):
                found.add(node.args[0].value)
    assert found and found <= FLAG_KEYS, found - FLAG_KEYS


def test_legend_lists_the_flags_asked_for_in_table_order():
    stages = [{"flags": ["client_bound"]}, {"flags": ["knee", "client_bound", "not_a_flag"]}]
    assert flags_in(stages) == ["knee", "client_bound"]
    assert legend_lines(["client_bound", "knee"]) == [f"flag knee: {meaning('knee')}",
                                                      f"flag client_bound: {meaning('client_bound')}"]
    assert legend_lines([]) == []


def test_final_table_ends_with_the_legend_of_its_flags_only():
    stages = [{"concurrency": 1, "requests": 3, "flags": []},
              {"concurrency": 2, "requests": 3, "flags": ["guard_warn"]}]
    lines = format_stage_table(stages, knee=1).split("\n")
    assert lines[-2:] == [f"flag knee: {meaning('knee')}", f"flag guard_warn: {meaning('guard_warn')}"]
    assert not any(line.startswith("flag ") for line in format_stage_table(stages[:1]).split("\n"))


def test_report_html_explains_every_flag_and_marks_the_ones_seen():
    summary = json.loads((ROOT / "tests" / "fixtures" / "summary_seeds_sweep.json").read_text())
    html = render_report_html(summary)
    legend = html[html.index('<table id="flags"'):]
    legend = legend[: legend.index("</table>")]
    for f in FLAGS:
        assert f"<th>{f.key}</th>" in legend and f.meaning.replace("'", "&#x27;") in legend
    knee = knee_of(summary)
    seen = {f for s in summary["stages"] for f in stage_flags(s, knee)}
    assert "knee" in seen and len(seen) >= 2
    assert legend.count("class=seen") == len(seen)


def test_the_docs_have_the_same_table():
    page = (ROOT / "docs" / "sweep.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", page, flags=re.M)
    assert [(f.key, f.meaning) for f in FLAGS] == [(k, m) for k, m in rows if k in FLAG_KEYS]
