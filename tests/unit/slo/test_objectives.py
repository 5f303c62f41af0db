"""SLO verdicts, attainment/goodput arithmetic, exact merging, the bracket and the bisection search."""

from __future__ import annotations

import json

import msgpack
import orjson
import pytest

from loadgen.errors import OVERLOAD_503
from loadgen.report.slo_line import slo_line
from loadgen.slo.objectives import Objectives, SloCounts, request_verdict, stage_slo
from loadgen.slo.search import bracket, next_search_concurrency, slo_summary
from loadgen.stats.records import RequestRecord


def stream(ttft_s: float, gaps_s: list[float], sent_s: float = 10.0):
    """A real completions record: first chunk at sent + ttft, then one token per gap."""
    rec = RequestRecord(sent_s, len(gaps_s) + 1, "completions")
    t = sent_s + ttft_s
    rec.on_payload(orjson.dumps({"choices": [{"text": "a", "finish_reason": None}]}), t)
    for i, g in enumerate(gaps_s):
        t += g
        last = i == len(gaps_s) - 1
        rec.on_payload(orjson.dumps({"choices": [{"text": "b", "finish_reason": "length" if last else None}]}), t)
    n = len(gaps_s) + 1
    rec.on_payload(orjson.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}}), t)
    rec.on_payload(b"[DONE]", t)
    return rec.finish(t, eof=True)


def failed():
    from loadgen.errors import RequestError

    rec = RequestRecord(0.0, 10, "completions")
    return rec.fail(RequestError(OVERLOAD_503, "HTTP 503"), 0.01)


OBJ = Objectives(ttft_s=0.5, tpot_s=0.05, e2e_s=2.0, itl_max_s=0.2)


def test_verdict_each_objective_alone():
    assert request_verdict(stream(0.4, [0.04] * 9), OBJ) == (True, ("ttft_s", "tpot_s", "e2e_s", "itl_max_s"))
    every, met = request_verdict(stream(0.6, [0.04] * 9), OBJ)  # TTFT over
    assert not every and "ttft_s" not in met and "tpot_s" in met
    every, met = request_verdict(stream(0.1, [0.06] * 9), OBJ)  # TPOT 60 ms over
    assert not every and met == ("ttft_s", "e2e_s", "itl_max_s")
    # mean TPOT fine (0.045), one 0.25 s stall: only itl_max_s fails
    every, met = request_verdict(stream(0.1, [0.0222] * 9 + [0.25] + [0.0222] * 9), OBJ)
    assert not every and "itl_max_s" not in met and "tpot_s" in met
    every, met = request_verdict(stream(0.4, [0.045] * 40), OBJ)  # E2E 2.2 s over
    assert not every and "e2e_s" not in met


def test_boundaries_are_inclusive_and_single_token_has_no_tpot():
    # binary-exact times, so the threshold is hit exactly
    assert request_verdict(stream(0.5, [0.0625] * 4, sent_s=0.0), Objectives(ttft_s=0.5, tpot_s=0.0625))[0]
    one = stream(0.1, [])
    assert one.tpot_s is None and request_verdict(one, Objectives(tpot_s=0.001, itl_max_s=0.001))[0]


def test_failed_request_meets_nothing():
    assert request_verdict(failed(), OBJ) == (False, ())


def test_stage_attainment_counts_failures_against_it():
    c = SloCounts()
    good = stream(0.1, [0.01] * 9)  # 10 tokens, meets all
    slow = stream(0.9, [0.01] * 9)  # TTFT miss
    for r in [good] * 7 + [slow] * 2:
        c.add(r, OBJ)
    c.add(failed(), OBJ)
    # the stage streamed 18 tok/s; its 9 ok requests (10 tokens each) made 90 tokens, 70 conforming
    row = stage_slo(c, requests=10, objectives=OBJ, tokens_per_s=18.0, measured_output_tokens=90)
    assert row["attainment"] == pytest.approx(0.7)
    assert row["attainment_by"] == {"ttft_s": 0.7, "tpot_s": 0.9, "e2e_s": 0.9, "itl_max_s": 0.9}
    assert row["goodput_output_tokens_per_s"] == pytest.approx(18.0 * 70 / 90)  # 14 tok/s
    assert row["goodput_requests_per_s"] == pytest.approx(18.0 * 7 / 90)  # 14 tok/s / 10 tokens each
    assert row["pass"] is False
    assert stage_slo(c, 10, Objectives(ttft_s=0.5, attainment=0.7), 18.0, 90)["pass"] is True
    everyone = SloCounts()
    for r in [good] * 5:
        everyone.add(r, OBJ)
    assert stage_slo(everyone, 5, OBJ, 18.0, 50)["goodput_output_tokens_per_s"] == 18.0  # = output tok/s


def test_empty_stage():
    row = stage_slo(SloCounts(), requests=0, objectives=OBJ, tokens_per_s=None, measured_output_tokens=0)
    assert row["attainment"] is None and row["pass"] is False and row["goodput_requests_per_s"] is None


def test_merge_is_exact_over_wire_forms():
    parts = [SloCounts() for _ in range(3)]
    whole = SloCounts()
    results = [stream(0.1 * i, [0.01 * (i % 7)] * 5) for i in range(1, 30)] + [failed()]
    for i, r in enumerate(results):
        parts[i % 3].add(r, OBJ)
        whole.add(r, OBJ)
    merged = SloCounts()
    for p, codec in zip(parts, (json, msgpack, json), strict=True):
        wire = codec.loads(codec.dumps(p.to_message()))
        merged.merge(SloCounts.from_message(wire))
    assert merged == whole and merged.met > 0
    with pytest.raises(ValueError, match="bogus"):
        SloCounts.from_message({"b": {"bogus": 1}})


def test_bracket():
    assert bracket([(1, True), (2, True), (4, True), (8, False), (16, False)]) == (4, 8)
    assert bracket([(1, False), (2, False)]) == (None, 1)
    assert bracket([(1, True), (2, True)]) == (2, None)
    # not monotonic: the largest passing wins, the first failing above it closes the bracket
    assert bracket([(1, True), (2, False), (4, True), (8, False)]) == (4, 8)


def test_search_bisects_to_resolution():
    """Against a known limit (C <= 35 passes), bisection converges inside the resolution."""
    obj = Objectives(tpot_s=0.045, search=True, resolution=0.1, max_search_stages=10)
    outcomes = [(c, c <= 35) for c in (1, 2, 4, 8, 16, 32, 64)]
    searched = []
    while (c := next_search_concurrency(outcomes, obj, len(searched))) is not None:
        searched.append(c)
        outcomes.append((c, c <= 35))
    lo, hi = bracket(outcomes)
    assert searched == [48, 40, 36, 34]  # 32..64 -> 32..48 -> 32..40 -> 32..36 -> 34..36
    assert (lo, hi) == (34, 36) and hi - lo <= 0.1 * lo
    ans = slo_summary(outcomes, obj, searched)
    assert ans["max_concurrency"] == lo and ans["search"]["converged"] and ans["search"]["stages"] == searched


def test_search_respects_stage_budget_and_switch():
    outcomes = [(32, True), (64, False)]
    assert next_search_concurrency(outcomes, Objectives(tpot_s=1), 0) is None  # search off
    obj = Objectives(tpot_s=1, search=True, max_search_stages=1)
    assert next_search_concurrency(outcomes, obj, 0) == 48
    assert next_search_concurrency(outcomes + [(48, True)], obj, 1) is None
    assert not slo_summary(outcomes + [(48, True)], obj, [48])["search"]["converged"]


def test_nothing_to_search_when_open_or_none_passed():
    obj = Objectives(tpot_s=1, search=True)
    assert next_search_concurrency([(1, True), (2, True)], obj, 0) is None
    assert next_search_concurrency([(1, False)], obj, 0) is None
    assert next_search_concurrency([(4, True), (5, False)], obj, 0) is None  # adjacent integers


def test_answer_lines_say_it_plainly():
    obj = Objectives(tpot_s=1)
    assert "none" in slo_line(slo_summary([(1, False)], obj, []))
    assert "above C=8" in slo_line(slo_summary([(4, True), (8, True)], obj, []))
    line = slo_line(slo_summary([(4, True), (8, False)], obj, []))
    assert "C=4" in line and "C=8 did not" in line and "99%" in line
