"""Command line: calibrate a preset from a run folder, then ask it what-if questions.

    llm-loadgen calibrate results/latest -o mine.yaml
    llm-loadgen whatif mine.yaml --input-tokens 2000 --kv-tokens 3140000 --spec off \\
        --replicas 2 --stages 1,4,16,64,256,1024 --slo ttft_s=2,tpot_s=0.03 --out results/whatif
    llm-loadgen whatif mine.yaml --scenario my-sweep.yaml --set output.max=300 --kv-tokens 262144

(``python -m loadgen.whatif calibrate|whatif ...`` is the same command: ``loadgen.cli`` hands
these two subcommands to ``main`` here.) ``calibrate`` writes the preset (a ``loadgen/sim/presets``
YAML, the fit in its comments; also usable with ``llm-loadgen sim --preset mine.yaml``),
``<preset>.fit.json`` (the fit, each equation's measured and model value, and the per-stage
residuals of the preset's prediction of the calibration run itself) and ``<preset>.fit.png`` /
``<preset>.fit.html`` (the fit plot, ``loadgen.report.fit_plot``, and its page). ``whatif`` prints
the predicted stage table, knee, SLO maximum and KV ceiling, and the one real stage to run to
confirm; ``--scenario FILE`` predicts the sweep that scenario would run (its stages or rates, plan,
length distributions or dataset, arrivals, SLO; ``loadgen.whatif.scenario``), read by the run's
loader with ``--set`` and then the whatif's flags laid over it; with ``--out`` also summary.json (with the calibration's fit.json as ``calibration``) and
report.html with the fit plot, every one marked predicted. Exit 2 on a bad option or a run that
cannot be calibrated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import yaml

from loadgen.config import StagesConfig, build_scenario
from loadgen.errors import ConfigError
from loadgen.report.files import write_results
from loadgen.report.predicted_html import render_fit_html
from loadgen.report.table import format_stage_table
from loadgen.run_folder.atomic import atomic_write_bytes, atomic_write_text
from loadgen.run_folder.folders import resolve_run_dir
from loadgen.run_folder.summary_file import load_summary
from loadgen.server.start_check import StartRefused
from loadgen.sim.config import SimConfigError, load, set_value, validate
from loadgen.slo.objectives import Objectives
from loadgen.whatif.calibrate import CalibrationError, fit, residuals
from loadgen.whatif.calibrate import accept_distribution as spec_for
from loadgen.whatif.summary import NOTE, WhatIf, predict
from loadgen.whatif.virtual_sweep import stage_rules


def _stages(scenario: dict) -> StagesConfig:
    """The measured run's ``stages`` section, as its summary.json recorded it (its ramp too: users
    started as Locust spawned them), read by the run's loader: defaults for keys an older summary lacks."""
    keys = {f.name for f in dataclasses.fields(StagesConfig)}
    return build_scenario({"stages": {k: v for k, v in (scenario.get("stages") or {}).items() if k in keys}}).stages


def _objectives_of(scenario: dict) -> Objectives:
    """The measured run's SLO objectives (its stages were isolated as its plan isolated them)."""
    return build_scenario({"slo": scenario["slo"]}).slo if scenario.get("slo") else Objectives()


def calibrate(runs: list[str], out: str, plots: bool = True, max_batch: int | None = None) -> int:
    run_dirs = [resolve_run_dir(run) for run in runs]
    summaries = [load_summary(d) for d in run_dirs]  # a clear error naming the folder and the fix
    summary, run_dir = summaries[0], run_dirs[0]  # the preset's server and the residuals' run
    f = fit(summaries, max_batch)
    preset = f.preset(summary)
    cfg = validate(_config(preset))
    sc = summary["scenario"]
    loads = [s["concurrency"] for s in summary["stages"] if s.get("concurrency") and not s.get("search")]
    predicted = predict(cfg, WhatIf(sc["input_tokens"], sc["output_tokens"], tuple(loads),
                                    stages=_stages(sc), objectives=_objectives_of(sc)))
    res = residuals(summary, predicted["stages"])
    head = [f"Calibrated by llm-loadgen calibrate from {', '.join(map(str, run_dirs))}",
            "model: step = step_base_ms + step_per_seq_ms x batch + step_per_prefill_token_us x prefill tokens"
            " + step_per_prefill_pair_ns x (prompt token, earlier token of its sequence) pairs (fitted with the server's"
            " prompt times at two lengths, else 0)"
            " + step_per_context_token_ns x context tokens of the decoding requests (fitted with two prompt lengths, else 0);",
            f"mean accept length {f.accept_length:.3f} tokens/step (spec_accept: drafts accepted until the first rejection, that mean);",
            f"fitted on stages C={', '.join(map(str, f.used_stages))}; KV from the run's guard "
            f"({(summary.get('guard') or {}).get('capacity_source')})"
            + ("" if f.client_overhead_s is None else
               f"; the client's own TTFT overhead {f.client_overhead_s * 1e3:.2f} ms (not in the engine)")
            + f". Residuals of {run_dir} (predicted - measured) / measured:"]
    head += [f"  C={r['concurrency']}: out tok/s {_pct(r['output_tokens_per_s']['rel'])}, TTFT p50 "
             f"{_pct(r['ttft_p50_s']['rel'])}, TPOT p50 {_pct(r['tpot_p50_s']['rel'])}"
             f"{' (' + ','.join(r['flags']) + ': not fitted)' if r['flags'] else ''}" for r in res]
    text = "".join(f"# {line}\n" for line in head) + yaml.safe_dump(preset, sort_keys=False)
    Path(out).write_text(text)
    fit_path = Path(out).with_suffix(".fit.json")
    fit_doc = {"run": str(run_dir), "preset": preset, "accept_length": f.accept_length,
               "fitted_stages": f.used_stages, "step_residuals": f.step_residuals,
               "client_overhead_s": f.client_overhead_s, "stage_residuals": res}
    fit_path.write_text(json.dumps(fit_doc, indent=2))
    written = [out, str(fit_path), *(_fit_report(fit_doc, Path(out)) if plots else [])]
    print("\n".join(head))
    print(f"llm-loadgen calibrate: wrote {', '.join(map(str, written))}")
    return 0


def _fit_report(fit_doc: dict, preset: Path) -> list[Path]:
    """``<preset>.fit.png`` (the fit plot) and ``<preset>.fit.html`` (its page) beside the preset."""
    from loadgen.report.fit_plot import fit_figure  # matplotlib: only when drawing
    from loadgen.report.plots import figure_png

    png = figure_png(fit_figure(fit_doc))
    png_path, html_path = preset.with_suffix(".fit.png"), preset.with_suffix(".fit.html")
    atomic_write_bytes(png_path, png)
    atomic_write_text(html_path, render_fit_html(fit_doc, png, str(preset)))
    return [png_path, html_path]


def fit_doc_of(preset: str) -> dict | None:
    """The calibration of ``preset`` (its ``.fit.json``, with ``file``: where it was read), or None for
    a preset without one (a bundled preset was not fitted)."""
    path = Path(preset).with_suffix(".fit.json")
    if not path.is_file():
        return None
    return {**json.loads(path.read_text()), "file": str(path)}


def _calibration_lines(fit_doc: dict | None) -> list[str]:
    """How well the preset predicted the run it was calibrated on (its ``.fit.json``), one line per
    stage; nothing for a preset without one (a bundled preset was not fitted)."""
    if fit_doc is None:
        return []
    lines = [f"calibration: this preset was fitted to {fit_doc['run']}; replaying that run it predicted "
             "(predicted - measured) / measured:"]
    lines += [f"calibration C={r['concurrency']}: out tok/s {_pct(r['output_tokens_per_s']['rel'])}, TTFT p50 "
              f"{_pct(r['ttft_p50_s']['rel'])}, TPOT p50 {_pct(r['tpot_p50_s']['rel'])}"
              for r in fit_doc["stage_residuals"]]
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _config(preset: dict):
    from loadgen.sim.config import SimConfig

    cfg = SimConfig()
    for key, value in preset.items():
        set_value(cfg, key, value)
    return cfg


def _objectives(args: argparse.Namespace) -> Objectives:
    """--slo without --scenario: parsed and validated as the run's --slo (``loadgen.config``), so it
    takes every slo.* key the run takes (per-request objectives, percentile limits such as
    ttft_p99_s, a named preset) and a bad key gets the run's error; --slo-search and
    --slo-early-stop as the run's."""
    if not args.slo:
        return Objectives()
    from loadgen.config import scenario_from_options

    sets = [f"slo.attainment={args.attainment}"]
    sets += [f"{AS_SCENARIO_KEY[k]}=true" for k in ("slo_search", "slo_early_stop") if getattr(args, k)]
    return scenario_from_options(argparse.Namespace(scenario=None, set=sets, slo=args.slo)).slo


# the whatif's own defaults without --scenario (the stage rules are the scenario's: ``stage_rules``)
DEFAULTS = {"input_tokens": 1000, "output_tokens": 1000, "stages": "1,2,4,8,16,32,64,128,256,512",
            "attainment": 0.99}
RULE_FLAGS = ("warmup_s", "duration_s", "max_warmup_s", "max_window_s")  # stages.<flag>
# whatif flag -> the run's option of the same meaning (loadgen.config.options: the same parsing and errors)
AS_RUN_OPTION = {"input_tokens": "input_tokens", "output_tokens": "output_tokens", "stages": "stages",
                 "rates": "rates", "warmup_s": "warmup", "duration_s": "stage_duration"}
# whatif flag -> the scenario key it sets (no run option of its own)
AS_SCENARIO_KEY = {"max_warmup_s": "stages.max_warmup_s", "max_window_s": "stages.max_window_s",
                   "attainment": "slo.attainment", "slo_search": "slo.search", "slo_early_stop": "slo.early_stop"}


def scenario_whatif(args: argparse.Namespace, **changes) -> tuple[WhatIf, list[str]]:
    """The WhatIf of ``--scenario`` with ``--set`` laid over it, then the whatif's own flags (the
    run's loader: ``loadgen.config.scenario_from_options``, so an error names the key and the flag)."""
    from loadgen.config import scenario_from_options
    from loadgen.whatif.scenario import whatif_of

    given = {k: getattr(args, k) for k in (*AS_RUN_OPTION, *AS_SCENARIO_KEY, "slo") if getattr(args, k) is not None}
    sets = list(args.set or [])
    sets += [f"{AS_SCENARIO_KEY[k]}={v}" for k, v in given.items() if k in AS_SCENARIO_KEY]
    if "stages" in given:  # concurrency stages: the scenario's rate stages, if any, are not run
        sets += ["rate.list=null", "rate.start=null", "rate.max=null"]
    if "rates" in given:
        sets += ["rate.start=null", "rate.max=null"]
    options = {AS_RUN_OPTION[k]: str(v) for k, v in given.items() if k in AS_RUN_OPTION}
    for which in ("input", "output"):  # --input-tokens N: every request N tokens, whatever the file's dist
        if f"{which}_tokens" in given:
            options[f"{which}_dist"] = "fixed"
    if "slo" in given:
        options["slo"] = given["slo"]
    sc = scenario_from_options(argparse.Namespace(scenario=args.scenario, set=sets, **options))
    return whatif_of(sc, **changes)


def whatif(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.kv_tokens:
        overrides["kv_tokens"] = args.kv_tokens
    if args.max_running:
        overrides["max_running"] = args.max_running
    if args.spec == "off":
        overrides["spec_accept"] = [1.0]
    elif args.spec:
        overrides["spec_accept"] = spec_for(float(args.spec))
    cfg = load(args.preset, overrides)
    notes: list[str] = []
    if args.scenario:
        w, notes = scenario_whatif(args, max_model_len=cfg.max_model_len, replicas=args.replicas, spread=args.spread)
    else:
        if args.set:
            raise ConfigError("--set", args.set[0], "sets a key of the scenario file",
                              "add --scenario FILE (e.g. --scenario config/default.yaml)")
        for key, value in DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        loads = tuple(float(x) if args.rates else int(x) for x in (args.rates or args.stages).split(","))
        stages = stage_rules(**{k: getattr(args, k) for k in RULE_FLAGS if getattr(args, k) is not None})
        w = WhatIf(args.input_tokens, args.output_tokens, loads, bool(args.rates), args.replicas, stages,
                   _objectives(args), spread=args.spread)
        if args.input_tokens + args.output_tokens > cfg.max_model_len:  # the run's start check refuses it too
            raise SimConfigError("--input-tokens + --output-tokens", args.input_tokens + args.output_tokens,
                                 f"exceeds the preset's max_model_len {cfg.max_model_len:,}: every request would "
                                 "be refused", "shorten them, or raise max_model_len in the preset file")
    open_loop = w.open_loop
    summary = predict(cfg, w)
    summary["predicted_from"] = {"preset": args.preset, "changes": {k: v for k, v in vars(args).items()
                                                                  if k not in ("cmd", "func", "out")}}
    fit_doc = fit_doc_of(args.preset)
    if fit_doc is not None:
        summary["calibration"] = fit_doc  # report.html draws its fit plot (loadgen.report.fit_plot)
    calibration = _calibration_lines(fit_doc)
    summary["notes"] += notes + calibration
    if args.scenario:
        summary["predicted_from"]["scenario"] = args.scenario
    print(f"PREDICTED (not measured): {cfg.model}, {w.requests.describe()}, "
          f"{w.replicas} replica(s), KV {cfg.kv_tokens:,} tokens each, spec_accept {cfg.spec_accept}")
    print(format_stage_table(summary["stages"], summary["knee"].get("rate_per_s" if open_loop else "concurrency"),
                             summary["guard"], w.knee_threshold, summary["slo"], open_loop))
    for row in summary["stages"]:
        if (sp := row.get("spread")) and sp["ttft_p50_s"]:
            load_text = f"{row['offered_rate_per_s']:g} req/s" if open_loop else f"C={row['concurrency']}"
            print(f"spread (predicted, {args.spread + 1} runs) {load_text}: out tok/s {sp['output_tokens_per_s'][0]:,.0f}"
                  f"-{sp['output_tokens_per_s'][1]:,.0f}, TTFT p50 {sp['ttft_p50_s'][0] * 1e3:.1f}-"
                  f"{sp['ttft_p50_s'][1] * 1e3:.1f} ms, TPOT p50 {sp['tpot_p50_s'][0] * 1e3:.2f}-"
                  f"{sp['tpot_p50_s'][1] * 1e3:.2f} ms")
    c = summary["confirm"]
    if c:
        load_text = f"--rates {c['load']:g}" if open_loop else f"--stages {c['load']}"
        print(f"confirm (predicted): run one real stage at {load_text} ({c['why']}): expect "
              f"{c['output_tokens_per_s']:,.0f} output tok/s, TTFT p50 {c['ttft_p50_s'] * 1e3:.1f} ms, "
              f"TPOT p50 {c['tpot_p50_s'] * 1e3:.2f} ms")
    print("\n".join([NOTE, *notes, *calibration]))
    if args.out:
        write_results(args.out, summary, plots=not args.no_plots)
        print(f"llm-loadgen whatif: wrote {args.out}/summary.json and report.html (predicted"
              f"{'' if fit_doc is None or args.no_plots else ', with the calibration fit plot'})")
    return 0


def parser(prog: str = "python -m loadgen.whatif") -> argparse.ArgumentParser:
    """The one parser of ``calibrate`` and ``whatif``; ``llm-loadgen`` passes its own name as ``prog``."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    cal = sub.add_parser("calibrate", help="fit a simulator preset to a finished run folder (or several "
                         "runs of the same server, e.g. two prompt lengths)")
    cal.add_argument("run", nargs="+", help="a run folder (or its parent: the latest run)")
    cal.add_argument("-o", "--out", default="calibrated.yaml", help="preset file to write (default: %(default)s); "
                     "beside it <preset>.fit.json, .fit.png and .fit.html")
    cal.add_argument("--no-plots", action="store_true", help="no .fit.png / .fit.html (no matplotlib)")
    cal.add_argument("--max-batch", type=int, help="fit only stages whose batch is at most this: the step time "
                     "as a straight line over the batches you will predict (default: every stage)")
    wi = sub.add_parser("whatif", help="predict a sweep from a (calibrated) preset with changes")
    wi.add_argument("preset", help="a preset YAML (llm-loadgen calibrate) or a bundled name")
    wi.add_argument("--scenario", metavar="FILE", help="predict the sweep this scenario file (or bundled "
                    "preset name) would run: its stages or rates, plan, lengths, dataset, arrivals and SLO. "
                    "Precedence: the file, then --set, then the flags below (docs/whatif.md 'A scenario file')")
    wi.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="set any scenario key, as the run's --set (needs --scenario; repeatable)")
    wi.add_argument("--input-tokens", type=int, help="every prompt this long (fixed; default 1000, or the "
                    "scenario's input)")
    wi.add_argument("--output-tokens", type=int, help="every output this long (fixed; default 1000, or the "
                    "scenario's output)")
    wi.add_argument("--kv-tokens", type=int, help="KV cache tokens per replica (e.g. x2 for an FP8 cache)")
    wi.add_argument("--max-running", type=int, help="the batch's most requests per replica (llama.cpp: -np slots)")
    wi.add_argument("--spec", help="speculative decoding: off, or a mean accept length in tokens per step")
    wi.add_argument("--replicas", type=int, default=1, help="replicas behind a round-robin router")
    wi.add_argument("--stages", help="concurrency stages (default 1,2,...,512, or the scenario's)")
    wi.add_argument("--rates", help="open-loop rates in requests/s instead of --stages (constant gaps; with "
                    "--scenario its rate.arrival)")
    wi.add_argument("--slo", help="objectives as the run's --slo (any slo.* key), e.g. ttft_s=2,tpot_s=0.03 or "
                    "ttft_p99_s=2 or preset=NAME (seconds)")
    wi.add_argument("--attainment", type=float, help="SLO attainment (default 0.99)")
    wi.add_argument("--slo-search", action="store_const", const=True,
                    help="as the run's: after the sweep, the search's bisection stages (predicted)")
    wi.add_argument("--slo-early-stop", action="store_const", const=True,
                    help="as the run's: a window closes once its SLO verdict is decided (predicted)")
    wi.add_argument("--warmup-s", type=float, help="stages.warmup_s (default 30)")
    wi.add_argument("--duration-s", type=float, help="stages.duration_s (default 60)")
    wi.add_argument("--max-warmup-s", type=float, help="stages.max_warmup_s (default 600)")
    wi.add_argument("--max-window-s", type=float, help="stages.max_window_s (default 900)")
    wi.add_argument("--spread", type=int, default=0, metavar="K",
                    help="K more runs with other seeds, the engine speed within +-3 %% and a 0-2 ms client jitter: "
                    "each stage's range (how sure)")
    wi.add_argument("--out", help="write summary.json, stages.csv and report.html (predicted) here")
    wi.add_argument("--no-plots", action="store_true", help="report.html without plots (no matplotlib)")
    return ap


def main(argv: list[str] | None = None, prog: str = "python -m loadgen.whatif") -> int:
    args = parser(prog).parse_args(argv)
    try:
        if args.cmd == "calibrate":
            return calibrate(args.run, args.out, plots=not args.no_plots, max_batch=args.max_batch)
        if args.replicas < 1:
            raise SimConfigError("--replicas", args.replicas, "must be >= 1")
        return whatif(args)
    except (SimConfigError, CalibrationError, ConfigError, StartRefused, ValueError, FileNotFoundError) as exc:
        print(f"llm-loadgen {args.cmd}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
