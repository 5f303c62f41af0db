"""``llm-loadgen demo``'s own output: the machine check, the server-time table, and the line on
client-bound stages."""

from __future__ import annotations

import json

from loadgen import demo


def stage(c: int, flags=(), lag_s: float = 0.002, tok_s: float = 30_000.0) -> dict:
    return {"concurrency": c, "flags": list(flags), "client": {"cpu_percent": 40.0, "loop_lag_p99_s": lag_s},
            "output_tokens_per_s": tok_s, "ttft_p99_s": 0.05, "tpot_p50_s": 0.004,
            "goodput_output_tokens_per_s": 0.0, "slo": {"attainment": 0.0}, "search": False}


def test_no_line_when_no_stage_was_client_bound():
    assert demo.client_bound_line([stage(128, ["knee"]), stage(256)], 10) is None


def test_the_line_names_the_stages_their_lag_what_it_touches_and_the_cause():
    stages = [stage(128), stage(256, ["client_bound", "slo_fail"], 0.0385), stage(512, ["client_bound"], 0.2483)]
    line = demo.client_bound_line(stages, 10)
    assert line == ("C=256, C=512 client-bound: the load generator, not the server, limited them (tokens "
                    "read up to 38, 248 ms late, 10x that in server time): their TTFT/ITL p99 are partly the "
                    "client's, their tok/s is not; cause: the 10x simulator on a small machine (docs/benchmarks.md "
                    "'How many workers')")
    assert "\n" not in line


def test_the_server_time_table_marks_client_bound_stages_and_ends_with_the_line(tmp_path, capsys):
    summary = {"stages": [stage(64), stage(512, ["client_bound", "slo_fail"], 0.05)],
               "knee": {"concurrency": 64}, "slo": {"max_concurrency": 64, "bracket": [64, 512]},
               "guard": {"max_concurrency": 785, "capacity_tokens": 1_570_000, "stopped_before": 1024}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    demo.print_simulated_time(tmp_path / "summary.json", 10.0)
    lines = capsys.readouterr().out.strip().splitlines()
    rows = {ln.split()[0]: ln for ln in lines if ln.strip()[:1].isdigit()}
    assert rows["512"].endswith("(client-bound)") and "client-bound" not in rows["64"]
    assert "     3,000" in rows["512"] and "500 ms" in rows["512"]  # tok/s / 10, TTFT p99 x 10
    assert lines[-1] == "demo: " + demo.client_bound_line(summary["stages"], 10.0)
    assert "demo:   KV ceiling     C=785 (1,570,000 tokens; the guard stopped before C=1024)" in lines


def test_a_busy_machine_halves_the_simulators_speed_and_says_why():
    quiet = demo.Machine(cpu_share=0.98, load_per_core=0.1, cores=2)
    assert not quiet.busy and demo.time_scale_for(quiet, None) == (10.0, None)
    assert quiet.line() == "this machine is quiet: 2 cores, load 0.10 per core, a spinning process got 98% of a core"
    for busy in (demo.Machine(0.5, 0.1, 2), demo.Machine(0.98, 1.5, 2)):
        scale, why = demo.time_scale_for(busy, None)
        assert busy.busy and scale == 5.0 and "instead of 10x" in why and "client-bound" in why
    assert demo.time_scale_for(demo.Machine(0.5, 2.0, 2), "20") == (20.0, None)  # DEMO_TIME_SCALE wins


def test_the_machine_check_measures_a_share_of_one_core():
    m = demo.machine_check(spin_s=0.05)
    assert 0 < m.cpu_share <= 1 and m.cores >= 1 and m.load_per_core >= 0
