"""The simulator as a reasoning model with speculative decoding and a prefix cache: thinking deltas
in both spellings, usage details, spec-decode counters. Pure parts, no server."""

from __future__ import annotations

import orjson
import pytest

from loadgen.engine_model.engine import Engine, EngineParams, SimRequest
from loadgen.engine_model.prefix import block_hashes
from loadgen.sim.config import SimConfigError, load
from loadgen.sim.framing import StreamFormat
from loadgen.sim.metrics import mean_accept_length
from loadgen.sim.request import BadRequest, parse


def fmt(**kw) -> StreamFormat:
    args = dict(chat=True, rid="r", created=0, model="m", prompt_tokens=10, flavor="vllm", include_usage=True,
                continuous_usage=True, reasoning_key="reasoning_content", reasoning_tokens=3)
    return StreamFormat(**{**args, **kw})


def event(raw: bytes) -> dict:
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    return orjson.loads(raw[6:-2])


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_thinking_deltas_then_a_crossing_chunk_carries_both(key):
    f = fmt(reasoning_key=key)
    thinking = event(f.content_event(b"", 2, None, b" a b"))
    assert thinking["choices"][0]["delta"] == {key: " a b"}
    both = event(f.content_event(b" c", 4, b"length", b" x"))
    assert both["choices"][0]["delta"] == {key: " x", "content": " c"}
    assert both["choices"][0]["finish_reason"] == "length"
    assert both["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}  # min(4 so far, 3)
    assert "prompt_tokens_details" not in both["usage"]  # no cache lookup: no detail


def test_usage_details_cached_and_reasoning_only_when_there():
    f = fmt(reasoning_usage=False)
    f.cached_tokens = 48
    u = event(f.usage_event(7))["usage"]
    assert u["prompt_tokens_details"] == {"cached_tokens": 48} and "completion_tokens_details" not in u
    plain = event(fmt(reasoning_tokens=0).content_event(b" a", 1))
    assert plain["choices"][0]["delta"] == {"content": " a"}
    assert "completion_tokens_details" not in plain["usage"]


def test_enable_thinking_is_read_and_checked():
    body = {"messages": [{"role": "user", "content": "a"}], "max_tokens": 2}
    assert parse(orjson.dumps(body), True, 100, 10).thinking is True
    off = {**body, "chat_template_kwargs": {"enable_thinking": False}}
    assert parse(orjson.dumps(off), True, 100, 10).thinking is False
    with pytest.raises(BadRequest, match="enable_thinking"):
        parse(orjson.dumps({**body, "chat_template_kwargs": {"enable_thinking": "no"}}), True, 100, 10)


def test_reasoning_options_validated():
    assert load(None, {"reasoning_field": "auto", "flavor": "sglang"}).reasoning_key() == "reasoning_content"
    assert load(None, {"reasoning_field": "auto"}).reasoning_key() == "reasoning"  # vllm flavor
    with pytest.raises(SimConfigError, match="reasoning_field"):
        load(None, {"reasoning_field": "thoughts"})
    with pytest.raises(SimConfigError, match="reasoning_tokens"):
        load(None, {"reasoning_tokens": -1})


def test_spec_counters_add_up_to_the_tokens_and_give_the_accept_length():
    engine = Engine(EngineParams(spec_accept=(0.2, 0.3, 0.5), seed=3))
    reqs = [SimRequest(10, 300) for _ in range(8)]
    for r in reqs:
        engine.submit(r)
    while not engine.idle:
        engine.step()
    st = engine.stats
    # every token: one from each prefill step, the rest k = 1 + accepted per draft
    assert st.generated_tokens_total == 8 * 300 == 8 + st.spec_drafts_total + st.spec_accepted_tokens_total
    assert mean_accept_length(st) == pytest.approx(0.2 * 1 + 0.3 * 2 + 0.5 * 3, rel=0.05)  # 2.3, ~800 draws


def test_cached_tokens_are_the_first_admissions_lookup():
    engine = Engine(EngineParams(prefix_cache_blocks=100, prefix_block_tokens=16))
    ids = list(range(100))
    first, second = (SimRequest(100, 2, prefix_hashes=block_hashes(ids, 16)) for _ in range(2))
    for r in (first, second):
        engine.submit(r)
        while not engine.idle:
            engine.step()
    assert (first.cached_tokens, second.cached_tokens) == (0, 96)  # 6 whole blocks of 16
    assert engine.prefix_cache.hit_tokens == 96 and engine.prefix_cache.queried_tokens == 200


def test_usage_details_as_each_flavor_sends_them():
    """vLLM (--enable-prompt-tokens-details) sends cached_tokens 0 on a miss and reasoning_tokens under
    completion_tokens_details; SGLang omits prompt_tokens_details when 0 (usage_processor.
    _details_if_cached) and puts reasoning_tokens at the top level of usage."""
    vllm, sglang = fmt(flavor="vllm"), fmt(flavor="sglang")
    for f in (vllm, sglang):
        f.cached_tokens = 0
    u = event(vllm.usage_event(5))["usage"]
    assert u["prompt_tokens_details"] == {"cached_tokens": 0}
    assert u["completion_tokens_details"] == {"reasoning_tokens": 3} and "reasoning_tokens" not in u
    u = event(sglang.usage_event(5))["usage"]
    assert "prompt_tokens_details" not in u and "completion_tokens_details" not in u
    assert u["reasoning_tokens"] == 3
    sglang.cached_tokens = 48
    assert event(sglang.usage_event(5))["usage"]["prompt_tokens_details"] == {"cached_tokens": 48}


def test_reasoning_delta_field_by_flavor():
    """vLLM streams thinking as delta.reasoning (renamed from reasoning_content), SGLang keeps
    delta.reasoning_content: the simulator's default (reasoning_field auto) follows its flavor."""
    for flavor, key in (("vllm", "reasoning"), ("sglang", "reasoning_content")):
        f = fmt(flavor=flavor, reasoning_key=load(None, {"flavor": flavor}).reasoning_key())
        assert event(f.content_event(b"", 1, None, b" a"))["choices"][0]["delta"] == {key: " a"}


def test_itl_histogram_vllm_one_sample_per_step_sglang_per_token():
    """A step that emitted 3 tokens (speculative decoding) after a 30 ms gap: vLLM records one
    inter-token sample of 30 ms for the request, SGLang three of 10 ms."""
    from loadgen.sim.metrics import SimMetrics

    vllm, sglang = SimMetrics("vllm"), SimMetrics("sglang")
    for m in (vllm, sglang):
        m.next_chunk(0.030, 3)
    assert sum(vllm.itl.counts) == 1 and vllm.itl.sum == pytest.approx(0.030)
    assert sum(sglang.itl.counts) == 3 and sglang.itl.sum == pytest.approx(0.030)
    assert sglang.itl.buckets()[4] == ("0.01", 3)  # every sample 10 ms: in the le=0.010 bucket
