"""The LLM figures in Locust's own web UI (port 8089): two extra tabs next to Locust's.

Locust 2.47's React UI draws *extended tabs*: each tab shows the *extended table* of the same key,
whose rows come from the ``extended_stats`` list of the ``/stats/requests`` JSON it polls every
couple of seconds. So this module (on the process that owns the run, local runner or master):

- declares the tabs, the tables' columns and a CSV link in ``web_ui.template_args``
  (``extended_tabs`` / ``extended_tables`` / ``extended_csv_files``; the UI camel-cases keys);
- adds ``extended_stats`` to Locust's ``/stats/requests`` answer (an ``after_request`` hook);
- serves the raw figures at ``/llm/stats`` (JSON) and the stage table at ``/llm/stages.csv``.

Everything comes from one ``llm_view``: the completed stages exactly as summary.json has them
(``Session.summary()``, the same source), a live row for each stage not yet final, the run totals,
the guard and the knee. A stage's load is named as everywhere else (``loadgen.stats.stage_load``): the
table's first column is ``C``, or in a rate sweep ``rate (req/s)``; the run tab says ``C=8`` or
``8 req/s``. Live rows use ``StageStats.row(window_s)`` with
window_s = run time now − window open (or the closed window's length once it closed).
The totals row's output_tokens_per_s = every output token received / run time so far.
"""

from __future__ import annotations

import json
import logging
import time

from loadgen.report.table import errors_compact, mismatch_compact, stages_csv_text
from loadgen.stats.failures import locust_name
from loadgen.stats.metrics import STAGE_METRICS, num
from loadgen.stats.stage_load import (
    is_rate_run,
    load_column,
    load_label,
    load_number,
    stage_label,
    stage_load,
)
from loadgen.stats.stage_stats import StageStats

log = logging.getLogger("llm_loadgen")

STAGES_TAB = "llm-stages"
RUN_TAB = "llm-run"
STATS_ROUTE = "/llm/stats"
CSV_ROUTE = "/llm/stages.csv"


def _text(value) -> str:
    return "-" if value is None else str(value)


# (display key, column title, cell from a summary.json-form stage row). The metric columns are
# loadgen.stats.metrics.STAGE_METRICS: key = the summary.json key, cells in the title's unit.
STAGE_COLUMNS = [
    ("stage", "Stage", lambda s: _text(s.get("index"))),
    ("status", "Status", lambda s: _text(s.get("status"))),
    ("load", "C", lambda s: load_number(stage_load(s))),  # titled by load_column: see template_declarations
    ("requests", "Requests", lambda s: _text(s.get("requests"))),
    ("errors", "Errors", errors_compact),
    *((m.key, m.title, m.cell) for m in STAGE_METRICS),
    ("flags", "Flags", lambda s: ",".join(s.get("flags") or []) or "-"),
    ("window_s", "Window (s)", lambda s: num(s.get("window_s"))),
    ("input_tokens", "Input tokens", lambda s: _text(s.get("input_tokens"))),
    ("output_tokens", "Output tokens", lambda s: _text(s.get("output_tokens"))),
    ("token_mismatch", "Token mismatch", mismatch_compact),
]


def column_titles(open_loop: bool) -> list[tuple[str, str]]:
    """(key, title) of the stages table: the load column is ``C``, or ``rate (req/s)`` (open loop)."""
    title, unit = load_column(open_loop)
    return [(k, (f"{title} ({unit})" if unit else title) if k == "load" else t) for k, t, _ in STAGE_COLUMNS]


def template_declarations(open_loop: bool = False) -> dict:
    """What ``web_ui.template_args`` gets: the tabs, their tables' columns, the CSV link."""
    return {
        "extended_tabs": [{"title": "LLM stages", "key": STAGES_TAB}, {"title": "LLM run", "key": RUN_TAB}],
        "extended_tables": [
            {"key": STAGES_TAB, "structure": [{"key": k, "title": t} for k, t in column_titles(open_loop)]},
            # not "name": Locust's table sorts rows by a "name" key unless a header is clicked
            {"key": RUN_TAB, "structure": [{"key": "item", "title": "Item"}, {"key": "value", "title": "Value"}]},
        ],
        # relative, so it follows --web-base-path like Locust's own links
        "extended_csv_files": [{"href": "." + CSV_ROUTE, "title": "Download LLM stages CSV"}],
    }


def live_rows(session, now_s: float | None) -> list[dict]:
    """Stages the session knows but has not finalized: measuring, finishing, or ramping/warming up.

    window_s = now_s − window open while measuring (None without a clock), the closed window's
    length afterwards; ramp/warmup of the current stage has no window yet.
    """
    rt, done = session.rt, {r["index"] for r in session.rows}
    out = []
    for k, info in sorted(session.stage_info.items()):
        if k in done:
            continue
        if session.finished_wall is not None:  # the run ended before this stage's row was made
            status, window_s = "stopped, not measured", info.window_s
        elif info.closed:
            status, window_s = "finishing", info.window_s
        elif info.open_t is not None:
            status = "measuring"
            window_s = max(now_s - info.open_t, 0.0) if now_s is not None else None
        elif k == rt.stage:
            status, window_s = rt.kind, None
        else:
            continue  # a stage the guard stopped before it ramped
        stats = rt.collector.stages.get(k) or StageStats()
        # a rate stage's row names its offered rate, as its final row will (results.open_loop_fields)
        out.append({"index": k, **info.load_fields(), "status": status, **stats.row(window_s),
                    "window_s": window_s, "search": info.search, "flags": ["slo_search"] if info.search else []})
    return out


def llm_view(session, now_s: float | None) -> dict:
    """Everything the tabs show, in summary.json form; ``now_s`` = seconds since the run started."""
    rt, summary = session.rt, session.summary(final=session.finished_wall is not None)
    stages = [dict(r, status="done") for r in summary["stages"]] + live_rows(session, now_s)
    totals = {"index": "all", "concurrency": None, "status": "run total",
              **rt.collector.totals.row(now_s), "window_s": now_s, "flags": []}
    return {
        "phase": {"stage": rt.stage, "kind": rt.kind},
        "users": rt.environment.runner.user_count if rt.environment.runner else 0,
        "stages": stages,
        "totals": totals,
        "guard": summary["guard"],
        "knee": summary["knee"],
        "slo": summary["slo"],
        "run": summary["run"],
        "compat": summary["server"].get("compat"),
    }


def display_row(stage: dict) -> dict:
    """One table row: the stage's figures as text, in the text table's units (ms, s, tok/s).
    Completed stages come from ``Session.summary()``, whose flags already include ``knee``."""
    return {key: cell(stage) for key, _, cell in STAGE_COLUMNS}


def run_items(view: dict) -> list[dict]:
    """The run tab: phase, guard, knee and run facts as (name, value) rows; in a rate sweep the
    loads (knee, guard stop and clamp, SLO maximum) are offered rates, ``8 req/s``."""
    g, knee, run, phase = view["guard"], view["knee"], view["run"], view["phase"]
    rate = is_rate_run(view)

    def load(v) -> str:  # "C=8" or "8 req/s"; "-" when there is none, as the tab's other cells
        return _text(v if v is None else load_label(v, rate))

    def text(v) -> str:
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else _text(v)

    if run.get("ended_at"):  # the run is over; the process (and this UI) lives on
        state = f"finished at {run['ended_at']} (exit code {run.get('exit_code')}; {run.get('stop_reason')})"
    elif phase["stage"] is not None:  # the stage's load from its row, as the console's phase lines name it
        row = next((r for r in view["stages"] if r["index"] == phase["stage"]), None)
        state = f"stage {phase['stage']}{f' ({stage_label(row)})' if row else ''}: {phase['kind']}"
    else:
        state = phase["kind"]
    loads = [
        ("Guard stopped before", load(g.get("stopped_before"))),
        ("Guard clamped to", load(g.get("clamped_to"))),
        ("Guard breaches", g.get("breaches")),
        ("Knee", load(knee.get("rate_per_s" if rate else "concurrency"))),
    ]
    if rate:
        loads += [("Knee threshold t (sustained: achieved >= (1 - t) x offered)", knee.get("threshold")),
                  ("KV ceiling (requests in flight)", g.get("max_concurrency"))]
    else:
        loads += [("Knee threshold (gain per doubling)", knee.get("threshold")),
                  ("KV ceiling (C)", g.get("max_concurrency"))]
    items = [
        ("Phase", state),
        ("Users (one rate dispatcher per process)" if rate else "Users", view["users"]),
        ("Model", run.get("model")),
        ("Endpoint", run.get("endpoint")),
        ("KV capacity (tokens)", g.get("capacity_tokens")),
        ("KV capacity source", g.get("capacity_source")),
        ("Guard action / margin", f"{g.get('action')} / {g.get('margin')}"),
        *loads,
        *slo_items(view.get("slo")),
        ("Stop reason", run.get("stop_reason")),
        ("Exit code", run.get("exit_code")),
        ("Server", (view.get("compat") or {}).get("server")),
    ]
    for kind, entries in sorted((view["totals"].get("failures") or {}).items()):
        if kind != "other_messages":  # the server's reasons, the first distinct ones per kind
            items += [(f"Server said ({locust_name(kind, e['status'])}, {e['requests']} requests)", e["message"])
                      for e in entries]
    return [{"item": name, "value": text(value)} for name, value in items]


def slo_items(slo: dict | None) -> list[tuple[str, object]]:
    """The run tab's SLO rows (none without objectives): the objectives and percentile limits, the
    answer so far and the search (an open-loop answer, ``load: rate_per_s``, is in offered req/s)."""
    if slo is None:
        return []
    lo, hi = slo["bracket"]
    rate = slo.get("load") == "rate_per_s"
    return [
        ("SLO objectives", ", ".join(f"{k} <= {v:g}" for k, v in slo["objectives"].items())
         + f" for {slo['attainment_target']:.0%} of requests" if slo["objectives"] else
         f"none per request ({slo['attainment_target']:.0%} of requests must succeed)"),
        *([("SLO percentile limits", ", ".join(f"{k} <= {v:g}" for k, v in slo["limits"].items()))]
          if slo.get("limits") else []),
        ("SLO max rate" if rate else "SLO max concurrency", "none passed" if lo is None else load_label(lo, rate)),
        ("SLO bracket", f"[{load_label(lo, rate)}, {'open above' if hi is None else load_label(hi, rate)}]"),
        (f"SLO search stages ({'req/s' if rate else 'C'})", ", ".join(map(load_number, slo["search"]["stages"])) or "-"),
    ]


def extended_stats(view: dict) -> list[dict]:
    """The ``extended_stats`` entry of ``/stats/requests``: rows for each extended table."""
    rows = [display_row(s) for s in view["stages"]] + [display_row(view["totals"])]
    return [{"key": STAGES_TAB, "data": rows}, {"key": RUN_TAB, "data": run_items(view)}]


def _run_clock(environment):
    """Seconds since the run started, on the shape's clock (the one window_open/close use)."""

    def now() -> float | None:
        shape = environment.shape_class
        return shape.get_run_time() if shape is not None else None

    return now


def install_webui(environment, clock=None) -> None:
    """Add the LLM tabs to ``environment.web_ui`` (the process that owns the run, before it starts).

    ``clock() -> float | None``: seconds since the run started; default the shape's run time.
    """
    from flask import Blueprint, make_response, request

    web_ui = environment.web_ui

    def view():  # the run's Session (environment.llm_run), looked up at each request
        return llm_view(environment.llm_run, clock())

    clock = clock or _run_clock(environment)
    web_ui.template_args.update(template_declarations(environment.llm.scenario.open_loop))
    base = getattr(environment.parsed_options, "web_base_path", "") or None
    bp = Blueprint("llm_loadgen", __name__, url_prefix=base)

    @bp.route(STATS_ROUTE)
    @web_ui.auth_required_if_enabled
    def llm_stats():
        return web_ui.app.json.response(view())

    @bp.route(CSV_ROUTE)
    @web_ui.auth_required_if_enabled
    def llm_stages_csv():
        response = make_response(stages_csv_text(view()["stages"]))
        response.headers["Content-Type"] = "text/csv"
        name = f"llm_stages_{time.strftime('%Y%m%d-%H%M%S')}.csv"
        response.headers["Content-Disposition"] = f"attachment;filename={name}"
        return response

    @web_ui.app.after_request
    def add_extended_stats(response):
        # Locust's stats view is memoized: the same Response object may come back, so the key is
        # replaced, never appended. A failure here must not break Locust's own stats.
        if request.endpoint != "locust.request_stats" or response.status_code != 200:
            return response
        try:
            data = json.loads(response.get_data())
            data["extended_stats"] = extended_stats(view())
            response.set_data(web_ui.app.json.dumps(data))
        except Exception:
            log.exception("llm-loadgen: adding the LLM tables to the web UI's stats failed")
        return response

    web_ui.app.register_blueprint(bp)
