"""First contact with servers stricter than vLLM/SGLang: a run works (adapted, and says how), or
stops within seconds quoting the server's reason. Real locust against the simulator's strict modes
(loadgen.sim.strict mimics the answers of real servers met by users)."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.errors import EXIT_SERVER_UNUSABLE
from loadgen.sim.launch import running_sim
from tests.support.raw_client import request
from tests.support.runlocust import run_locust

pytestmark = pytest.mark.integration

SMOKE = ("--scenario", "config/smoke.yaml", "--set", "guard.watch=false")


def served(url: str) -> dict[str, float]:
    """The simulator's own request counters: completed, and refused by reason."""
    text = request(url, "GET", "/metrics").body.decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "llmsim_requests_completed_total":
                out["completed"] = s.value
            elif s.name == "llmsim_rejected_requests_total":
                out[s.labels["reason"]] = s.value
    return out


def test_vendor_fields_refused_by_name_are_dropped_and_recorded(tmp_path):
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--eos-prob", "0.5",
                     "--reject-fields", "ignore_eos,min_tokens,continuous_usage_stats") as sim:
        run = run_locust(sim.url, tmp_path / "r", *SMOKE)
        counts = served(sim.url)
    assert run.code == 0, run.stderr[-2000:]
    s = run.summary
    compat = s["server"]["compat"]
    assert sorted(compat["dropped_fields"]) == ["continuous_usage_stats", "ignore_eos", "min_tokens"]
    assert compat["output_forced"] is False and compat["server"] == "vllm"  # owned_by; adapted anyway
    probes = s["preflight"]["probes"]
    assert probes[-1] == "ok" and probes[:-1] == ["http_4xx (adapted)"] * (len(probes) - 1)
    assert counts["strict"] == len(probes) - 1 and "http_4xx" not in s["totals"]["errors"]
    assert "not sent: ignore_eos, min_tokens" in run.stderr
    # without ignore_eos the simulator stops early at a seeded EOS: the mismatch counts show it
    assert sum(st["token_mismatch"]["output"] for st in s["stages"]) > 0
    assert all(st["error_count"] == 0 and st["requests"] > 0 for st in s["stages"])


def test_a_server_that_takes_only_string_prompts_gets_calibrated_text(tmp_path):
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--prompt-token-ids", "reject") as sim:
        run = run_locust(sim.url, tmp_path / "r", *SMOKE)
    assert run.code == 0, run.stderr[-2000:]
    s = run.summary
    assert s["server"]["compat"]["prompt_kind"] == "text"
    assert "text prompts calibrated on usage" in run.stderr
    for st in s["stages"]:  # calibrated on the server's usage: exactly 64 tokens each
        assert st["requests"] > 0 and st["token_mismatch"]["input"] == 0 and st["error_count"] == 0


def test_a_server_refusing_every_request_stops_in_seconds_quoting_it(tmp_path):
    """request.compat explicit (no adapting): every request 400; the probe finds it, exit 4."""
    with running_sim("--preset", "fixed", "--prompt-token-ids", "reject") as sim:
        t0 = time.monotonic()
        run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--set", "request.compat=vllm", timeout_s=60)
        took = time.monotonic() - t0
        counts = served(sim.url)
    assert run.code == EXIT_SERVER_UNUSABLE, run.stderr[-2000:]
    assert took < 30
    line = next(x for x in run.stderr.splitlines() if "refused the run's request" in x)
    assert "HTTP 400: prompt: Input should be a valid string" in line and "request.compat" in line
    assert counts["strict"] < 5  # the probe and its one retry, not a flood
    failures = run.summary["totals"]["failures"]["http_4xx"]
    assert failures[0]["status"] == 400 and "valid string" in failures[0]["message"]


def test_refusals_mid_start_trip_the_fail_fast(tmp_path):
    """The probe (2 output tokens) fits; the run's requests do not (the server hides its context
    length from /v1/models, as proxies do): the first requests all fail 400, the run stops."""
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--max-model-len", "80",
                     "--advertise-max-model-len", "0") as sim:
        t0 = time.monotonic()
        run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--set", "stages.list=[4, 8]", timeout_s=90)
        took = time.monotonic() - t0
        counts = served(sim.url)
    assert run.code == EXIT_SERVER_UNUSABLE, run.stderr[-2000:]
    assert took < 30
    line = next(x for x in run.stderr.splitlines() if "refused the first" in x)
    assert "HTTP 400" in line and "maximum context length is 80" in line and "--input-tokens" in line
    assert counts["bad_request"] < 50  # well under a few hundred
    s = run.summary
    assert s["run"]["exit_code"] == EXIT_SERVER_UNUSABLE
    assert s["totals"]["failures"]["http_4xx"][0]["status"] == 400
    assert "failed request (http_400): HTTP 400: This model's maximum context length is 80" in run.stderr


def test_a_vocabulary_that_vllm_does_not_report_is_found_and_the_run_works(tmp_path):
    """The simulator refuses as vLLM 0.32 does (a 200 stream carrying a 400 error event naming the
    ID); /v1/models gives no vocabulary. The start check bisects with one-token prompts, draws IDs
    in [1000, 5000), and no request of the run fails; the refused tries are not in the totals."""
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--vocab-size", "5000") as sim:
        run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--endpoint", "completions", "--stages", "2")
        counts = served(sim.url)
    assert run.code == 0, run.stderr[-2000:]
    s = run.summary
    assert s["server"]["compat"]["token_id_range"] == [1000, 5000] and s["server"]["compat"]["prompt_kind"] == "token_ids"
    assert s["totals"]["errors"] == {} and s["stages"][0]["error_count"] == 0
    probes = s["preflight"]["probes"]
    assert probes[0] == "stream_error (adapted)" and probes[-1] == "ok"
    assert counts["strict"] == probes.count("stream_error (adapted)") and 1 < counts["strict"] <= 16
    assert "the server refused token ID" in run.stderr and "vocabulary ends at 5000" in run.stderr


def test_an_in_stream_refusal_stops_the_run_in_seconds_when_compat_is_fixed(tmp_path):
    """request.compat=vllm: nothing to adapt; vLLM's in-stream 400 stops the start check, quoted."""
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2", "--vocab-size", "5000") as sim:
        t0 = time.monotonic()
        run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--endpoint", "completions", "--stages", "2",
                         "--set", "request.compat=vllm")
        took = time.monotonic() - t0
        counts = served(sim.url)
    assert run.code == EXIT_SERVER_UNUSABLE, run.stderr[-2000:]
    assert took < 30 and counts["strict"] == 2 and counts.get("completed", 0) == 0
    assert "is out of vocabulary" in run.stderr
