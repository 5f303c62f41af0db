"""Conformance against a real engine: llama.cpp's `llama-server` serving a tiny random GGUF model.

The real `locust -f locustfile.py` runs against it as a new user would: the default token-ID range
[1000, 30000) is refused by a vocabulary of 8,192 (pinned below), and the start check fits it to the
vocabulary the server reports (``meta.n_vocab``); a few cases fit it by hand to compare runs.
Token counts are compared exactly with the server's own ``llamacpp:tokens_predicted_total``.

The binary comes from scripts/ensure-llama-server.sh (built once per machine by `make test`);
without it these tests skip, saying how to build it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from loadgen import errors
from loadgen.config import load_scenario
from loadgen.wire.compat import Compat, build_body
from loadgen.wire.endpoints import PATHS
from loadgen.workload.prompts import ChatPrompts, TokenIdPrompts
from tests.support.llamacpp import LlamaServer, http, require_llama_server
from tests.support.make_gguf import write_tiny_llama
from tests.support.ports import free_port
from tests.support.runlocust import ROOT, locust_cmd, run_dir, run_locust
from tests.support.sim_http import metrics, value

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PREDICTED = "llamacpp:tokens_predicted_total"
IN, OUT = 32, 16
# 1 s windows: each still lasts until C requests finished in it (turnover), and these checks count
SHORT = ("--scenario", "config/smoke.yaml", "--input-tokens", str(IN), "--output-tokens", str(OUT),
         "--warmup", "1", "--stage-duration", "1")


@pytest.fixture(scope="module")
def binary() -> str:
    return require_llama_server()


@pytest.fixture(scope="session")
def model_8192(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny-8192.gguf", vocab_size=8192)


@pytest.fixture(scope="module")
def server(binary, model_8192):
    """Two slots of 512 tokens each (-c 1024 -np 2), shared by the tests of this module (each reads
    the server's counters before and after its own run)."""
    with LlamaServer(binary, model_8192.path, ctx_tokens=1024, slots=2) as srv:
        yield srv


def wait_until_idle(server: LlamaServer, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while server.metric("llamacpp:requests_processing") > 0:
        assert time.monotonic() < deadline, f"llama-server still busy after {timeout_s} s"
        time.sleep(0.05)


def client_tokens_ahead(exporter_port: int) -> float:
    """The run's received tokens (counted as chunks arrive) less its finished requests' output tokens,
    from its exporter: tokens of streams still running; 0 before the exporter answers."""
    try:
        fams = metrics(f"http://127.0.0.1:{exporter_port}")
    except OSError:
        return 0.0
    return (value(fams, "llm_loadgen_received_output_tokens", "llm_loadgen_received_output_tokens_total")
            - value(fams, "llm_loadgen_output_tokens", "llm_loadgen_output_tokens_total"))


def fitted_ids(vocab_size: int) -> str:
    """A token-ID range inside the vocabulary, past the control tokens and the byte symbols."""
    return f"prompt.token_id_range=[300,{vocab_size}]"


def test_server_reports_the_vocabulary_and_every_calibration_word_is_one_token(server, model_8192):
    (entry,) = server.get_json("/v1/models")["data"]
    assert entry["id"] == server.alias and entry["owned_by"] == "llamacpp"
    assert entry["meta"]["n_vocab"] == 8192
    assert len(model_8192.one_token_words) > 100
    for word in model_8192.one_token_words:
        assert len(server.tokenize(word)) == 1, word
        assert len(server.tokenize(" " + word)) == 1, word


def test_default_requests_are_refused_400_with_the_servers_reason(server):
    """What today's defaults meet on a small server (issue 13): token IDs drawn from [1000, 30000)
    outside a vocabulary of 8,192, and a prompt longer than a slot's context (-c 1024 over 2 slots:
    512, which is also what /v1/models reports as n_ctx). Nothing is generated for either."""
    assert server.get_json("/v1/models")["data"][0]["meta"]["n_ctx"] == 512
    before = server.metric(PREDICTED)
    sc = load_scenario(None, {"input_tokens": IN, "output_tokens": OUT})
    prompt = TokenIdPrompts(sc.input_tokens, tuple(sc.prompt.token_id_range), (0, 0, 0)).next()
    assert max(prompt) >= 8192
    status, body = http(server.url + PATHS["completions"],
                             json.loads(build_body(sc, server.alias, prompt, Compat())))
    assert status == 400, body
    assert json.loads(body)["error"] == {"code": 400, "message": "Prompt contains invalid tokens",
                                         "type": "invalid_request_error"}
    chat = load_scenario(None, {"endpoint": "chat", "input_tokens": IN, "output_tokens": OUT})
    status, body = http(server.url + PATHS["chat"],
                             json.loads(build_body(chat, server.alias, ChatPrompts(600, (0,)).next(), Compat())))
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == 512, error
    assert error["n_prompt_tokens"] > 600 and "exceeds the available context size" in error["message"]
    assert server.metric(PREDICTED) == before


def test_output_beyond_the_slots_context_is_cut_with_finish_reason_length(server):
    """prompt + max_tokens > n_ctx is not refused: generation stops when the slot is full."""
    status, body = http(server.url + PATHS["completions"],
                             {"model": server.alias, "prompt": list(range(300, 300 + IN)),
                              "max_tokens": 600, "ignore_eos": True})
    assert status == 200, body
    reply = json.loads(body)
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["prompt_tokens"] == IN
    assert reply["usage"]["completion_tokens"] == 512 - IN


def _sweep_checks(run, stages: list[int], out: int = OUT) -> dict:
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    s = run.summary
    assert [st["concurrency"] for st in s["stages"]] == stages
    for st in s["stages"]:
        assert st["error_count"] == 0 and st["requests"] > 0, st
        assert st["output_tokens"] == out * st["requests"]
        assert st["input_tokens"] == IN * st["requests"]
        assert st["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}
    assert s["totals"]["errors"] == {}
    return s


# output tokens a request in the C=1,2,4 sweep: short enough that C=4 still fits the two 512-token
# slots (4 x (32 + 192) = 896 <= 1,024: the guard lets it run, to be queued)
SWEEP_OUT = 192


@pytest.fixture(scope="module")
def default_sweep(server, tmp_path_factory):
    """One completions sweep C=1,2,4 of 32 + 192 tokens, IDs as a new user gets them (no hand-fitted
    range), for two tests: its token counts and the range the start check chose, and its TTFT once
    users outnumber the slots. Returns (the run, tokens the server generated meanwhile)."""
    before = server.metric(PREDICTED)
    run = run_locust(server.url, tmp_path_factory.mktemp("sweep") / "res", *SHORT, "--stages", "1,2,4",
                     "--output-tokens", str(SWEEP_OUT), "--set", "guard.watch_interval_s=0.1")
    wait_until_idle(server)  # the counter grows when a slot is released
    return run, server.metric(PREDICTED) - before


def test_completions_sweep_output_tokens_equal_the_servers_counter(default_sweep):
    """Our output tokens (the start check's probe included) equal the server's counter. (Runs with
    hand-fitted ranges are counted the same way below: the small vocabulary, the held-back text.)"""
    run, delta = default_sweep
    s = _sweep_checks(run, [1, 2, 4], out=SWEEP_OUT)
    assert s["totals"]["output_tokens"] == delta > 0


def test_a_new_users_default_run_fits_the_vocabulary_by_itself(default_sweep):
    """No hand-fitted range: IDs come from [1000, 8192) (the reported vocabulary), 0 errors."""
    run, _ = default_sweep
    s = _sweep_checks(run, [1, 2, 4], out=SWEEP_OUT)
    compat = s["server"]["compat"]
    assert (compat["server"], compat["detected_by"], compat["token_id_range"]) == ("llamacpp", "owned_by", [1000, 8192])
    assert s["preflight"]["probes"] == ["ok"] and s["server"]["max_model_len"] == 512
    assert "token IDs drawn from [1000, 8192): the vocabulary has 8192 tokens" in run.stderr


def test_the_start_check_knows_a_slots_context(server, tmp_path):
    """The default 1000 + 1000 tokens cannot fit a 512-token slot: one line at start, exit 2."""
    run = run_locust(server.url, tmp_path / "res", "--stages", "1", timeout_s=60)
    assert run.code == errors.EXIT_CONFIG, run.stderr[-2000:]
    assert "input_tokens + output_tokens = 2,000 exceeds the server's max_model_len 512" in run.stderr


def test_a_refusing_server_stops_within_seconds_with_its_reason(binary, model_8192, tmp_path):
    """llama-server with --api-key and a run without the key: refused, said once, exit 4, no flood."""
    with LlamaServer(binary, model_8192.path, ctx_tokens=512, slots=1,
                     extra_args=("--api-key", "sekrit-key")) as srv:
        t0 = time.monotonic()
        run = run_locust(srv.url, tmp_path / "res", *SHORT, "--stages", "4", "--model", srv.alias,
                         "--set", "api_key_env=null", timeout_s=60)
        took = time.monotonic() - t0
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-2000:]
    assert took < 30
    lines = [x for x in run.stderr.splitlines() if "refused the run's request" in x]
    assert len(lines) == 1, run.stderr[-2000:]
    assert "HTTP 401: Invalid API Key" in lines[0] and "check the API key" in lines[0]
    assert run.summary["preflight"]["probes"] == ["http_4xx", "http_4xx"]  # the probe and its one retry


def test_chat_sweep_with_prompts_calibrated_against_usage(server, tmp_path):
    """Calibration probes (max_tokens 1, at most 9 of them: fit_word_count's 2 + 1 + 6 rounds) add
    1 token each to the server's counter; a lost or doubled request would add OUT = 16."""
    before = server.metric(PREDICTED)
    run = run_locust(server.url, tmp_path / "res", *SHORT, "--stages", "1,2", "--endpoint", "chat")
    wait_until_idle(server)  # the counter grows when a slot is released
    delta = server.metric(PREDICTED) - before
    s = _sweep_checks(run, [1, 2])
    assert 2 <= delta - s["totals"]["output_tokens"] <= 9


def test_small_vocabulary_with_fitted_ids(binary, tmp_path):
    model = write_tiny_llama(tmp_path / "tiny-512.gguf", vocab_size=512)
    with LlamaServer(binary, model.path, ctx_tokens=256, slots=1) as srv:
        assert srv.get_json("/v1/models")["data"][0]["meta"]["n_vocab"] == 512
        before = srv.metric(PREDICTED)
        run = run_locust(srv.url, tmp_path / "res", *SHORT, "--stages", "1", "--set", fitted_ids(512))
        wait_until_idle(srv)
        delta = srv.metric(PREDICTED) - before
    s = _sweep_checks(run, [1])
    assert s["totals"]["output_tokens"] == delta > 0


def test_tokens_whose_text_the_server_holds_back_are_ok_and_counted(server, tmp_path):
    """logit_bias makes every generated token the byte 0xF0 (id 3 + 0xF0: the byte symbols follow
    the 3 control tokens), the lead byte of a 4-byte UTF-8 character. llama-server holds an
    unfinished character back, so each stream is one chunk with text "" that finishes it, and its
    usage counts 16 tokens. The same happens by chance to a short sampled output (the start check's
    2-token probe ended mid-character in about 1 run in 50): such a request is ok, textless, and
    timed by its finishing chunk; a stage warning says so."""
    before = server.metric(PREDICTED)
    run = run_locust(server.url, tmp_path / "res", *SHORT, "--stages", "1", "--set", fitted_ids(8192),
                     "--set", "request.extra_body.logit_bias={\"243\": 100}")
    wait_until_idle(server)
    delta = server.metric(PREDICTED) - before
    s = _sweep_checks(run, [1])
    (st,) = s["stages"]
    assert st["textless_requests"] == st["requests"] and s["totals"]["textless_requests"] > st["requests"]
    assert s["totals"]["output_tokens"] == delta > 0
    assert st["ttft_p50_s"] == pytest.approx(st["e2e_p50_s"], rel=0.15) and st["tpot_p50_s"] is None
    assert f"stage 0: {st['requests']} of {st['requests']} requests had tokens (server usage) but no text" \
        in run.stderr


def test_the_sweep_is_guarded_by_the_servers_own_slots(default_sweep):
    """llama.cpp's /props (2 slots x 512 tokens) is the KV guard's capacity, said at the start with
    the slots; the server watch reads its /metrics (requests deferred = the queue)."""
    run, _ = default_sweep
    s = run.summary
    assert (s["guard"]["capacity_tokens"], s["guard"]["capacity_source"]) == (1024, "llamacpp_props"), s["guard"]
    assert (s["server"]["flavor"], s["server"]["slots"]) == ("llamacpp", 2)
    assert "KV capacity 1,024 tokens (source: llamacpp_props)" in run.stderr
    assert "the server runs 2 requests at once (llamacpp slots); a stage above C=2 queues" in run.stderr
    assert "UNGUARDED" not in run.stderr


def test_a_stage_past_the_slots_is_flagged_as_queueing(default_sweep):
    """At C=4 on 2 slots, two requests are always deferred: the watch sees the queue in most polls
    (10 a second) and flags the stage; at C=1 and C=2 nothing waits."""
    run, _ = default_sweep
    one, two, four = run.summary["stages"]
    assert four["server"]["over_capacity"] is True and "server_over_capacity" in four["flags"], four["server"]
    assert any(e.startswith("queue >= 1") for e in four["server"]["over_capacity_evidence"]), four["server"]
    assert four["server"]["waiting_max"] >= 1 and four["server"]["running_max"] == 2
    for low in (one, two):
        assert low["server"]["polls"] >= 2 and low["server"]["over_capacity"] is False, low["server"]


def test_a_stage_that_does_not_fit_the_slots_is_refused_before_it_starts(server, tmp_path):
    """16 x (32 + 192) = 3,584 tokens > 2 x 512: the guard stops before C=16 (exit 3), nothing sent."""
    before = server.metric(PREDICTED)
    run = run_locust(server.url, tmp_path / "res", *SHORT, "--stages", "16", "--output-tokens", str(SWEEP_OUT))
    assert run.code == errors.EXIT_GUARD_ABORT, run.stderr[-3000:]
    assert run.summary["guard"]["stopped_before"] == 16 and run.summary["stages"] == []
    wait_until_idle(server)
    assert server.metric(PREDICTED) - before == 2  # the start check's probe request only


def test_more_users_than_slots_queue_and_ttft_shows_it(default_sweep):
    """-np 2: at C=2 every request has a slot; at C=4 two always wait for one, so TTFT jumps to a
    large share of a request's E2E. (With -np 4 the same run gives TTFT p50 ~3 ms at C=4, about
    1.5x C=2's, and under 10 % of E2E: it is the queue, not batching, that these bounds see.)
    A 1 s window still holds some 40 requests a stage (the bounds hold with a wide margin: C=4's
    TTFT p50 has been 10-15x the others', half its E2E)."""
    run, _ = default_sweep
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    one, two, four = run.summary["stages"]
    assert one["error_count"] == two["error_count"] == four["error_count"] == 0
    assert four["ttft_p50_s"] > 3 * max(one["ttft_p50_s"], two["ttft_p50_s"]), (one, two, four)
    assert four["ttft_p50_s"] > 0.3 * four["e2e_p50_s"], four


def test_ctrl_c_mid_stream_exits_130_and_writes_the_summary(binary, model_8192, tmp_path):
    """Ctrl-C while stage 1's two streams run: exit 130, stage 0 kept, the cut streams counted as
    cancelled with the tokens they got. The streams are long (2,000 tokens, 1-3 s each on their own
    server of 2,048 tokens a slot) so that they still run when a loaded machine gets round to the
    signal: the module's 400-token streams (~0.3 s) both finished before a busy run's Ctrl-C cut
    anything (6802 < 6800: no token beyond the finished requests', and the start probe's 2)."""
    results, port = tmp_path / "res", free_port()
    with LlamaServer(binary, model_8192.path, ctx_tokens=4096, slots=2) as server:
        before = server.metric(PREDICTED)
        proc = subprocess.Popen(
            locust_cmd(server.url, "--results-dir", str(results), *SHORT, "--stages", "1,2",
                       "--output-tokens", "2000", "--set", fitted_ids(8192), "--exporter-port", str(port)),
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for line in proc.stderr:
                if "stage 1 C=2: ramp" in line:
                    break
            # both streams under way (llama-server's /slots) and the client has read tokens of them:
            # its exporter's received tokens run 100 ahead of the finished requests'
            deadline, decoding, ahead = time.monotonic() + 30, [], 0.0
            while time.monotonic() < deadline:
                decoding = [s for s in server.get_json("/slots") if s.get("is_processing")]
                ahead = client_tokens_ahead(port)
                if len(decoding) == 2 and ahead >= 100:
                    break
                time.sleep(0.02)
            assert len(decoding) == 2 and ahead >= 100, f"stage 1's two streams never ran at once: {decoding}, {ahead}"
            proc.send_signal(signal.SIGINT)
            err = proc.stderr.read()
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wait_until_idle(server)  # the counter grows when a slot is released
        generated = server.metric(PREDICTED) - before
    assert code == errors.EXIT_INTERRUPTED, err[-3000:]
    s = json.loads((run_dir(results) / "summary.json").read_text())
    assert s["run"]["stop_reason"] == "interrupted" and s["run"]["exit_code"] == errors.EXIT_INTERRUPTED
    assert s["stages"][0]["concurrency"] == 1 and s["stages"][0]["requests"] > 0
    assert "Traceback" not in err
    # the cut streams are not failures; they got tokens beyond the finished requests', and never
    # more than the server generated
    totals = s["totals"]
    assert totals["errors"] == {}
    assert totals["cancelled_requests"] == 2 and totals["cancelled_output_tokens"] >= 100, totals
    assert totals["output_tokens"] < totals["received_output_tokens"] <= generated


def test_every_stage_gets_the_servers_decode_seconds_per_token_and_an_itl_breakdown(default_sweep):
    """llama.cpp counts decode seconds and tokens (tokens_predicted_seconds_total / _total) when a
    slot is released: their ratio over a stage's window is its time per token, beside the client's
    per-token ITL in the breakdown. How closely the two agree is a known answer timed on two clocks,
    checked at C=1 with nothing beside it (tests/integration/test_llamacpp_timing.py, solo): here a
    busier stage has shown 50 % apart on this shared 2-core machine, which is what the breakdown is
    for. Without histograms there is no TTFT or E2E breakdown, said once."""
    run, _ = default_sweep
    for st in run.summary["stages"]:
        assert st["server"]["decode_per_token"]["count"] > 0 and set(st["breakdown"]) == {"itl"}, st["breakdown"]
        itl = st["breakdown"]["itl"]
        assert itl["client_mean_s"] > 0 and itl["server_mean_s"] > 0, itl
    assert "breakdown off: llama.cpp's counters give means per token only" in run.stderr


CACHED = "llamacpp:prompt_tokens_cached_total"
EVALUATED = "llamacpp:prompt_tokens_total"  # prompt tokens the server evaluated: the uncached ones


def test_multi_turn_cached_tokens_are_the_servers_prefix_cache_count(binary, model_8192, tmp_path):
    """Turns resend the history, which llama.cpp finds in the slot's cache: every request's
    usage.prompt_tokens_details.cached_tokens (client) is what its counter counts. The chat text
    calibration's probes (not streamed, not in the totals) may hit the cache too; they are bounded
    by their own prompt tokens, which the server counts and the totals do not. Over the stage's
    window the server's count and the stage's requests' agree (they differ only by requests in
    flight at the window's edges), and requests.jsonl adds up to the totals."""
    with LlamaServer(binary, model_8192.path, ctx_tokens=4096, slots=2) as srv:  # 2048 a slot: 3 turns fit
        before = {n: srv.metric(n) for n in (CACHED, EVALUATED)}
        run = run_locust(srv.url, tmp_path / "res", *SHORT, "--stages", "2", "--endpoint", "chat", "--turns", "3",
                         "--stage-duration", "4", "--set", "guard.watch_interval_s=0.1", "--requests-jsonl")
        wait_until_idle(srv)
        cached, evaluated = (srv.metric(n) - before[n] for n in (CACHED, EVALUATED))
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    cache = run.summary["totals"]["prompt_cache"]
    assert cache["reported_requests"] == run.summary["totals"]["requests"]  # llama.cpp reports it always
    calibration_prompt_tokens = cached + evaluated - cache["reported_prompt_tokens"]
    assert 0 <= cached - cache["cached_prompt_tokens"] <= calibration_prompt_tokens < 0.1 * (cached + evaluated)
    assert cache["cached_prompt_tokens"] > 0.3 * cache["reported_prompt_tokens"]  # later turns hit
    (stage,) = run.summary["stages"]
    server = stage["server"]
    assert server["prefix_cache_source"] == "counters"
    lines = [json.loads(x) for x in (run.run_dir / "requests.jsonl").read_text().splitlines()]
    assert sum(x["cached_tokens"] or 0 for x in lines) == cache["cached_prompt_tokens"]
    # the server counts the requests its counters saw between the window's two reads, the client
    # those it sent inside the window: they differ by the requests in flight at the two edges, at
    # most C at each (a fixed 2 % over a 2 s window failed once under load: 7215 against 7379)
    edges = 2 * stage["concurrency"]
    load = [x for x in lines if x["phase"] == "load"]
    edge_cached = sum(sorted(x["cached_tokens"] or 0 for x in load)[-edges:])
    edge_prompt = sum(sorted(x["input_tokens"] for x in load)[-edges:])
    measured_prompt = sum(x["input_tokens"] for x in load if x["stage"] == 0)
    assert abs(server["prefix_cache_hit_tokens"] - stage["cached_prompt_tokens"]) <= edge_cached, (server, edge_cached)
    assert abs(server["prefix_cache_hit_rate"] - stage["cached_share"]) <= (
        (edge_cached + edge_prompt) / (measured_prompt - edge_prompt)), (server, stage["cached_share"])
    assert edge_cached < 0.25 * stage["cached_prompt_tokens"], "the window holds many requests beside its edges"


SPEC = ("llamacpp:spec_decode_num_drafts_total", "llamacpp:spec_decode_num_accepted_tokens_total",
        "llamacpp:spec_decode_num_draft_tokens_total", PREDICTED)


def test_speculative_decoding_with_a_draft_model_is_read_from_the_servers_counters(binary, model_8192, tmp_path):
    """The tiny model drafts for itself (``--model-draft`` the same file, 3 tokens a draft) and the
    target samples greedily (temperature 0): every drafted token is accepted. The stage's accept
    figures over its window agree with the run-long counters, and those add up: each verify step
    yields its accepted drafts plus one token, each request one more token from its prefill, so
    predicted = accepted + drafts + requests (+ a plain step where nothing was left to draft). llama.cpp streams each accepted token in a chunk of
    its own, so the client's tokens per chunk stays 1: speculation shows only in the counters."""
    draft = ("--model-draft", str(model_8192.path), "--spec-type", "draft-simple", "--spec-draft-n-max", "3")
    with LlamaServer(binary, model_8192.path, ctx_tokens=1024, slots=2, extra_args=draft) as srv:
        before = {n: srv.metric(n) for n in SPEC}
        run = run_locust(srv.url, tmp_path / "res", *SHORT, "--stages", "2", "--output-tokens", "64",
                         "--set", "guard.watch_interval_s=0.1", "--set", 'request.extra_body={"temperature": 0}')
        wait_until_idle(srv)
        drafts, accepted, draft_tokens, predicted = (srv.metric(n) - before[n] for n in SPEC)
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    totals = run.summary["totals"]
    assert totals["errors"] == {} and predicted == totals["output_tokens"]
    # the start check's 2-token probe: its second token is the last, decoded without a draft
    plain_steps = len(run.summary["preflight"]["probes"])
    assert predicted == accepted + drafts + totals["requests"] + plain_steps
    assert accepted == draft_tokens > 0  # greedy self-drafting: every draft token accepted
    (stage,) = run.summary["stages"]
    server = stage["server"]
    assert server["spec_source"] == "counters" and 0 < server["spec_drafts"] < drafts
    assert server["spec_acceptance_rate"] == 1.0
    assert server["spec_accept_length"] == pytest.approx(1 + accepted / drafts, rel=0.02)
    assert 3 < server["spec_accept_length"] <= 4  # 1 + up to 3 drafted tokens a step
    assert stage["tokens_per_chunk"] == pytest.approx(1.0, abs=0.01)  # < the accept length: one token a chunk
    assert f"server accept length {server['spec_accept_length']:.2f}, 100% of drafts accepted" in run.stderr
