"""The LLM tabs in Locust's web UI.

Unit: a real Environment with a web UI on 127.0.0.1 port 0, a real Runtime and Session driven
through their public API (session events, RequestRecord -> Collector with a fake clock); the
routes are read through Flask's test client. Integration: a real non-headless locust run against
the simulator, polled over HTTP, compared with the summary.json it writes.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gevent
import pytest
from locust.env import Environment

from loadgen.config import load_scenario
from loadgen.errors import READ_TIMEOUT, RequestError
from loadgen.fleet.distributed import Fleet
from loadgen.locust_face.webui import (
    CSV_ROUTE,
    RUN_TAB,
    STAGES_TAB,
    STATS_ROUTE,
    install_webui,
    template_declarations,
)
from loadgen.phases import Phase
from loadgen.report.table import errors_compact, ms, num, secs
from loadgen.run.kv_guard import decide, decide_rate
from loadgen.run.plan import GuardDecided, PhaseStarted, StageFinal, WindowClosed, WindowOpened
from loadgen.run.runtime import Runtime
from loadgen.run.session import Session
from loadgen.server.replies import Capacity
from loadgen.stats.records import RequestRecord
from tests.support.ports import free_port
from tests.support.runlocust import run_dir
from tests.support.users import Idle

ROOT = Path(__file__).resolve().parents[2]
PROMPT, TTFT_0, TTFT_1, GAP = 64, 0.25, 0.5, 0.02



def run_request(rt, stage, sent, ttft, tokens, window_stage):
    """One ok /v1/completions stream of ``tokens`` one-token chunks, ``GAP`` apart, through the
    real record and collector; its tokens count toward ``window_stage``'s window as they arrive."""
    rec, seen, t = RequestRecord(sent, tokens, "/v1/completions"), 0, sent + ttft
    for i in range(tokens):
        last = i == tokens - 1
        obj = {"choices": [{"text": "x", "finish_reason": "length" if last else None}],
               "usage": {"prompt_tokens": PROMPT, "completion_tokens": i + 1}}
        rec.on_payload(json.dumps(obj).encode(), t)
        rt.collector.add_window_tokens(window_stage, rec.chunk_tokens_seen - seen)
        seen = rec.chunk_tokens_seen
        if not last:
            t += GAP
    rec.on_payload(b"[DONE]", t)
    rt.collector.record_result(rec.finish(t, eof=True), stage, PROMPT, tokens, rt.scenario.slo)


def fail_request(rt, stage, sent, chunks):
    """A request that got ``chunks`` one-token chunks, then timed out."""
    rec = RequestRecord(sent, 10, "/v1/completions")
    for i in range(chunks):
        rec.on_payload(json.dumps({"choices": [{"text": "x", "finish_reason": None}]}).encode(), sent + i)
        rt.collector.add_window_tokens(stage, 1)
    rt.collector.record_result(rec.fail(RequestError(READ_TIMEOUT, "test"), sent + 5), stage, PROMPT, 10,
                               rt.scenario.slo)


@pytest.fixture
def ui(tmp_path, monkeypatch):
    """(environment, runtime, clock cell, Flask test client) with the LLM tabs installed."""
    monkeypatch.setattr(sys, "argv", ["locust"])  # Locust's UI re-parses sys.argv for its options
    env = Environment(user_classes=[Idle], host="http://127.0.0.1:9")
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, delayed_start=True)  # as locust's main: init listeners first
    rt = Runtime(env, load_scenario(ROOT / "config" / "smoke.yaml", {"results_dir": str(tmp_path)}))
    env.llm = rt
    env.llm_run = Session(rt, Fleet(rt))
    env.llm_run.stage_guard.capacity = Capacity(300, "scenario", None, None, "test")
    now = [0.0]
    install_webui(env, clock=lambda: now[0])
    env.web_ui.start()
    deadline = time.monotonic() + 5
    while env.web_ui.server is None and time.monotonic() < deadline:
        gevent.sleep(0.01)
    yield env, rt, now, env.web_ui.app.test_client()
    env.web_ui.stop()
    env.runner.quit()


def phase(session, stage, kind, concurrency):
    session.on_event(PhaseStarted(stage, kind, concurrency), 0.0)


def measure_stage_0(rt):
    """Stage 0 (C=1): 4 ok x 10 tokens + 1 timeout (2 tokens) in a 10 s window, closed at t=20."""
    s = rt.environment.llm_run
    phase(s, 0, Phase.RAMP, 1)
    phase(s, 0, Phase.MEASURE, 1)
    s.on_event(WindowOpened(0, 10.0), 10.0)
    for i in range(4):
        run_request(rt, 0, 10.0 + i, TTFT_0, 10, window_stage=0)
    fail_request(rt, 0, 15.0, chunks=2)
    phase(s, 0, Phase.CLOSING, 1)
    s.on_event(WindowClosed(0, 20.0, 1), 20.0)


def run_stage_0_and_open_stage_1(rt, now):
    """Stage 0 as ``measure_stage_0``, final. Stage 1 (C=2): window open at t=25, 2 ok x 5 tokens so
    far. One unmeasured request (8 tokens)."""
    s = rt.environment.llm_run
    measure_stage_0(rt)
    phase(s, 1, Phase.RAMP, 2)
    run_request(rt, None, 21.0, TTFT_0, 8, window_stage=None)
    s.on_event(StageFinal(0), 21.0)
    phase(s, 1, Phase.MEASURE, 2)
    s.on_event(WindowOpened(1, 25.0), 25.0)
    for i in range(2):
        run_request(rt, 1, 25.0 + i, TTFT_1, 5, window_stage=1)
    now[0] = 29.0


def test_template_args_declare_tabs_tables_and_csv_and_the_page_carries_them(ui):
    env, _, _, client = ui
    args = env.web_ui.template_args
    assert [t["key"] for t in args["extended_tabs"]] == [STAGES_TAB, RUN_TAB]
    tables = {t["key"]: [c["key"] for c in t["structure"]] for t in args["extended_tables"]}
    assert set(tables) == {STAGES_TAB, RUN_TAB}
    assert {"ttft_p50_s", "itl_p99_s", "tpot_p50_s", "e2e_p99_s", "output_tokens_per_s", "errors"} <= set(tables[STAGES_TAB])
    assert args["extended_csv_files"][0]["href"] == "." + CSV_ROUTE
    port = env.web_ui.server.server_port  # the real server, over a (gevent) socket
    html = get(f"http://127.0.0.1:{port}/").decode()  # Locust re-renders template_args on each load
    assert '"extended_tabs"' in html and STAGES_TAB in html and "LLM stages" in html


def test_stats_route_has_done_live_and_total_rows_with_known_numbers(ui):
    _, rt, now, client = ui
    run_stage_0_and_open_stage_1(rt, now)
    view = client.get(STATS_ROUTE).get_json()
    done, live = view["stages"]
    assert [s["status"] for s in view["stages"]] == ["done", "measuring"]
    # the completed stage is summary.json's row (same source), plus its status
    assert {k: v for k, v in done.items() if k != "status"} == json.loads(json.dumps(rt.environment.llm_run.summary()["stages"][0]))
    assert (done["index"], done["concurrency"], done["requests"], done["error_count"]) == (0, 1, 4, 1)
    assert done["errors"] == {READ_TIMEOUT: 1}
    assert done["output_tokens"] == 40 and done["input_tokens"] == 4 * PROMPT
    assert done["output_tokens_per_s"] == pytest.approx((40 + 2) / 10.0)  # window tokens incl. failed
    assert done["ttft_p50_s"] == pytest.approx(TTFT_0, rel=0.012)
    assert done["itl_p99_s"] == pytest.approx(GAP, rel=0.012)
    assert done["tpot_p50_s"] == pytest.approx(GAP, rel=0.012)
    assert done["e2e_p50_s"] == pytest.approx(TTFT_0 + 9 * GAP, rel=0.012)
    # live stage 1: window so far = 29 - 25 s
    assert (live["index"], live["concurrency"], live["requests"], live["window_s"]) == (1, 2, 2, 4.0)
    assert live["output_tokens_per_s"] == pytest.approx(10 / 4.0)
    assert live["ttft_p50_s"] == pytest.approx(TTFT_1, rel=0.012)
    # run totals: every request, every token received over the run time so far
    tot = view["totals"]
    assert (tot["requests"], tot["error_count"], tot["output_tokens"]) == (7, 1, 40 + 10 + 8)
    assert tot["output_tokens_per_s"] == pytest.approx((40 + 2 + 10 + 8) / 29.0)
    assert view["phase"] == {"stage": 1, "kind": "measure"}
    assert view["guard"]["capacity_tokens"] == 300 and view["guard"]["capacity_source"] == "scenario"


def test_requests_stats_carries_the_tables_live_despite_locusts_cache(ui):
    _, rt, now, client = ui
    run_stage_0_and_open_stage_1(rt, now)
    ext = {e["key"]: e["data"] for e in client.get("/stats/requests").get_json()["extended_stats"]}
    rows, items = ext[STAGES_TAB], {i["item"]: i["value"] for i in ext[RUN_TAB]}
    view = client.get(STATS_ROUTE).get_json()
    assert [r["status"] for r in rows] == ["done", "measuring", "run total"]
    for row, stage in zip(rows, [*view["stages"], view["totals"]], strict=True):
        assert row["output_tokens_per_s"] == num(stage["output_tokens_per_s"])
        assert row["ttft_p50_s"] == ms(stage["ttft_p50_s"]) and row["itl_p99_s"] == ms(stage["itl_p99_s"])
        assert row["e2e_p99_s"] == secs(stage["e2e_p99_s"]) and row["errors"] == errors_compact(stage)
    assert rows[0]["errors"] == "1 timeout:1" and rows[0]["output_tokens_per_s"] == "4.20"
    columns = {c["key"] for t in ui[0].web_ui.template_args["extended_tables"] if t["key"] == STAGES_TAB
               for c in t["structure"]}
    assert all(set(r) == columns for r in rows)  # every column has a cell in every row
    assert items["KV capacity (tokens)"] == "300" and items["Phase"] == "stage 1 (C=2): measure"

    # stage 1 ends and the guard refuses C=4: Locust's memoized stats answer, our tables move on
    s = rt.environment.llm_run
    phase(s, 1, Phase.CLOSING, 2)
    s.on_event(WindowClosed(1, 30.0, 2), 30.0)
    closing = client.get(STATS_ROUTE).get_json()["stages"][1]  # closed, requests may still run
    assert (closing["status"], closing["window_s"], closing["output_tokens_per_s"]) == ("finishing", 5.0, 2.0)
    s.on_event(GuardDecided(2, 4, decide(4, 300, 64, 32, 0.1, "abort")), 30.0)
    s.on_event(StageFinal(1), 31.0)
    ext = {e["key"]: e["data"] for e in client.get("/stats/requests").get_json()["extended_stats"]}
    rows, items = ext[STAGES_TAB], {i["item"]: i["value"] for i in ext[RUN_TAB]}
    assert [r["status"] for r in rows] == ["done", "done", "run total"]
    assert rows[1]["output_tokens_per_s"] == num(10 / 5.0)
    assert rt.environment.llm_run.knee() == 1 and rows[0]["flags"] == "knee" and items["Knee"] == "C=1"
    assert items["Guard stopped before"] == "C=4" and items["Guard clamped to"] == "-"


def test_slo_figures_search_stage_and_answer_in_the_tabs(ui, tmp_path):
    """Objective TTFT <= 0.4 s: stage 0's 4 ok requests (TTFT 0.25 s) meet it, its timeout does
    not (4 of 5); stage 1, a search stage, sends TTFT 0.5 s requests (0 of 2 so far)."""
    _, rt, now, client = ui
    rt.scenario = load_scenario(ROOT / "config" / "smoke.yaml", {
        "results_dir": str(tmp_path), "slo.ttft_s": 0.4, "slo.attainment": 0.8, "slo.search": True})
    s = rt.environment.llm_run
    measure_stage_0(rt)
    s.on_event(StageFinal(0), 21.0)
    s.on_event(PhaseStarted(1, Phase.RAMP, 2, search=True), 22.0)
    s.on_event(PhaseStarted(1, Phase.MEASURE, 2, search=True), 24.0)
    s.on_event(WindowOpened(1, 25.0), 25.0)
    for i in range(2):
        run_request(rt, 1, 25.0 + i, TTFT_1, 5, window_stage=1)
    now[0] = 29.0
    view = client.get(STATS_ROUTE).get_json()
    done, live = view["stages"]
    assert done["slo_attainment"] == 0.8 and done["slo"]["pass"] and done["search"] is False
    assert done["goodput_output_tokens_per_s"] == pytest.approx(4.2 * 40 / 42)  # 40 of 42 tokens conform
    assert live["slo_attainment"] == 0.0 and live["search"] is True and live["flags"] == ["slo_search"]
    assert view["slo"]["max_concurrency"] == 1 and view["slo"]["bracket"] == [1, None]
    ext = {e["key"]: e["data"] for e in client.get("/stats/requests").get_json()["extended_stats"]}
    rows, items = ext[STAGES_TAB], {i["item"]: i["value"] for i in ext[RUN_TAB]}
    assert rows[0]["slo_attainment"] == "80.0" and rows[1]["flags"] == "slo_search"
    assert items["SLO max concurrency"] == "C=1" and items["SLO bracket"] == "[C=1, open above]"
    assert items["SLO objectives"] == "ttft_s <= 0.4 for 80% of requests"
    assert items["KV ceiling (C)"] == str(300 // (64 + 32))


def test_a_rate_sweep_names_its_stages_and_knee_by_rate_in_both_tabs(ui, tmp_path):
    """Open loop at 4 then 8 req/s: stage 0 achieves its rate (4 requests in a 1 s window), stage 1
    is measuring. The stages table's load column is the offered rate (also in the live row), the
    run tab names the guard's and the knee's loads in req/s, and no cell says C=."""
    env, rt, now, client = ui
    rt.scenario = load_scenario(ROOT / "config" / "smoke.yaml", {"results_dir": str(tmp_path), "rate.list": [4.0, 8.0]})
    s = env.llm_run
    phase(s, 0, Phase.RAMP, 4.0)
    phase(s, 0, Phase.MEASURE, 4.0)
    s.on_event(WindowOpened(0, 10.0), 10.0)
    for i in range(4):
        run_request(rt, 0, 10.0 + 0.1 * i, 0.1, 2, window_stage=0)
        rt.collector.add_window_request(0)
    phase(s, 0, Phase.CLOSING, 4.0)
    s.on_event(WindowClosed(0, 11.0, 1), 11.0)
    s.on_event(StageFinal(0), 11.5)
    phase(s, 1, Phase.RAMP, 8.0)
    phase(s, 1, Phase.MEASURE, 8.0)
    s.on_event(WindowOpened(1, 12.0), 12.0)
    s.on_event(GuardDecided(2, 16.0, decide_rate(16.0, 1.0, 300, 64, 32, 0.1, "abort")), 12.5)
    now[0] = 13.0
    view = client.get(STATS_ROUTE).get_json()
    done, live = view["stages"]
    assert (done["concurrency"], done["offered_rate_per_s"], done["achieved_rate_per_s"]) == (None, 4.0, 4.0)
    assert (live["status"], live["concurrency"], live["offered_rate_per_s"]) == ("measuring", None, 8.0)
    ext = {e["key"]: e["data"] for e in client.get("/stats/requests").get_json()["extended_stats"]}
    rows, items = ext[STAGES_TAB], {i["item"]: i["value"] for i in ext[RUN_TAB]}
    assert [r["load"] for r in rows] == ["4", "8", "-"]
    assert items["Phase"] == "stage 1 (8 req/s): measure"
    assert items["Guard stopped before"] == "16 req/s" and items["Knee"] == "-"  # one stage: no knee yet
    assert items["KV ceiling (requests in flight)"] == str(300 // (64 + 32))
    assert not [v for v in items.values() if "C=" in v]
    titles = {t["key"]: {c["key"]: c["title"] for c in t["structure"]}
              for t in template_declarations(open_loop=True)["extended_tables"]}
    assert titles[STAGES_TAB]["load"] == "rate (req/s)"
    assert {c["key"]: c["title"] for c in env.web_ui.template_args["extended_tables"][0]["structure"]}["load"] == "C"


def test_stages_csv_download(ui):
    _, rt, now, client = ui
    run_stage_0_and_open_stage_1(rt, now)
    resp = client.get(CSV_ROUTE)
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(resp.get_data(as_text=True))))
    assert [(r["index"], r["status"], r["requests"]) for r in rows] == [("0", "done", "4"), ("1", "measuring", "2")]
    assert float(rows[0]["output_tokens_per_s"]) == pytest.approx(4.2)
    assert rows[0]["errors.read_timeout"] == "1"


def test_a_broken_view_leaves_locusts_stats_intact(ui):
    _, rt, _, client = ui
    ui[0].llm_run = None  # llm_view cannot work: Locust's own answer must still come through
    data = client.get("/stats/requests").get_json()
    assert "stats" in data and "extended_stats" not in data


# --- integration: a real locust run with its web UI -----------------------------------------------


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


TAB_PROBE = "document.body.innerText"


def render_tabs(base: str, profile: Path, tabs: dict[str, str]) -> dict[str, tuple[str, bytes]]:
    """Open each ``{tab key: text expected}`` tab of Locust's page in headless Chromium and wait
    until its text shows the expected text (the UI fills tables from its stats poll).
    Returns {tab: (page text, PNG screenshot)} and the page errors under the key "errors"."""
    from tests.integration.test_report_chromium import DevToolsPipe, console_errors

    chrome, out = DevToolsPipe(profile), {}
    try:
        target = chrome.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = chrome.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            chrome.call(f"{domain}.enable", session=session)
        chrome.call("Emulation.setDeviceMetricsOverride",
                    {"width": 1800, "height": 700, "deviceScaleFactor": 1, "mobile": False}, session)
        for tab, expect in tabs.items():
            chrome.events.clear()
            chrome.call("Page.navigate", {"url": f"{base}/?tab={tab}"}, session)
            chrome.wait_event("Page.loadEventFired")
            text, deadline = "", time.monotonic() + 15
            while expect not in text and time.monotonic() < deadline:
                time.sleep(0.25)
                text = chrome.call("Runtime.evaluate", {"expression": "document.body.innerText",
                                                        "returnByValue": True}, session)["result"].get("value") or ""
            shot = chrome.call("Page.captureScreenshot", {"format": "png"}, session)
            out[tab] = (text, base64.b64decode(shot["data"]), console_errors(chrome.events))
        return out
    finally:
        chrome.close()


@pytest.mark.integration
def test_web_ui_of_a_real_run_shows_what_summary_json_reports(tmp_path):
    """Real run, web UI on: the JSON route's final stages are summary.json's; with Chromium, the
    LLM tab of Locust's own page shows them (screenshot kept in tmp_path)."""
    from loadgen.sim.launch import running_sim
    from tests.integration.test_report_chromium import CHROMIUM

    port, results = free_port(), tmp_path / "results"
    base = f"http://127.0.0.1:{port}"
    autoquit = "15" if CHROMIUM else "3"  # the UI stays up this long after the sweep: time to render
    page = None
    with running_sim("--preset", "fixed") as sim:
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py"), "--host", sim.url,
               "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "--autoquit", autoquit,
               "--scenario", "config/smoke.yaml", "--results-dir", str(results), "--loglevel", "WARNING"]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            seen_live, last, html, stats = False, None, "", None
            deadline = time.monotonic() + 90
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    view = json.loads(get(base + STATS_ROUTE))
                    stats = json.loads(get(base + "/stats/requests"))
                    html = html or get(base + "/").decode()
                except OSError:  # not up yet, or already gone
                    time.sleep(0.3)
                    continue
                seen_live |= any(s["status"] == "measuring" for s in view["stages"])
                last = view
                if view["run"]["stop_reason"] is not None and all(s["status"] == "done" for s in view["stages"]):
                    break
                time.sleep(0.5)
            if CHROMIUM and last is not None and proc.poll() is None:
                page = render_tabs(base, tmp_path / "profile", {STAGES_TAB: "run total", RUN_TAB: "KV capacity"})
            code = proc.wait(timeout=max(deadline - time.monotonic(), 1) + 20)
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert code == 0, err[-3000:]
    summary = json.loads((run_dir(results) / "summary.json").read_text())
    assert seen_live, "no poll saw a stage being measured"
    assert len(summary["stages"]) == 2 and last is not None
    assert [{k: v for k, v in s.items() if k != "status"} for s in last["stages"]] == summary["stages"]
    assert last["guard"] == summary["guard"] and last["knee"] == summary["knee"]
    assert all(s["requests"] > 0 and s["output_tokens_per_s"] > 0 for s in last["stages"])
    assert last["totals"]["requests"] >= sum(s["requests"] for s in summary["stages"])
    assert '"extended_tabs"' in html and STAGES_TAB in html
    rows = {e["key"]: e["data"] for e in stats["extended_stats"]}[STAGES_TAB]
    assert rows[0]["ttft_p50_s"] == ms(summary["stages"][0]["ttft_p50_s"])
    if page is not None:
        for tab, (_, png, _) in page.items():
            (tmp_path / f"webui_{tab}.png").write_bytes(png)
        print(f"screenshots: {tmp_path}/webui_*.png")
        text, _, errors = page[STAGES_TAB]
        assert errors == []
        assert "LLM STAGES" in text.upper() and "TTFT p50 (ms)" in text and "run total" in text
        for stage in summary["stages"]:  # the figures summary.json reports, as the tab prints them
            assert ms(stage["ttft_p50_s"]) in text and num(stage["output_tokens_per_s"]) in text
        text, _, errors = page[RUN_TAB]
        assert text.index("Phase\t") < text.index("KV capacity (tokens)") < text.index("Exit code")  # our order
        assert errors == [] and f"Stop reason\t{summary['run']['stop_reason']}" in text
        assert f"KV capacity source\t{summary['guard']['capacity_source'] or '-'}" in text
