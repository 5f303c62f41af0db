"""Simulated automatic prefix caching: pure cache rules and the engine's prefill cost."""

from __future__ import annotations

import pytest

from loadgen.engine_model.engine import Engine, EngineParams, SimRequest
from loadgen.engine_model.prefix import PrefixCache, block_hashes
from loadgen.sim.request import parse


def test_hashes_chain_so_only_a_whole_shared_prefix_matches():
    a = block_hashes(list(range(64)), 16)
    b = block_hashes(list(range(48)) + [999] * 16, 16)
    c = block_hashes([7] + list(range(1, 64)), 16)  # first block differs: nothing shared
    assert len(a) == 4 and a[:3] == b[:3] and a[3] != b[3]
    assert not set(a) & set(c)
    assert block_hashes(list(range(15)), 16) == ()  # a partial block is never cached


def test_lookup_counts_leading_blocks_and_keeps_one_token_to_compute():
    cache = PrefixCache(16, 100)
    h = block_hashes(list(range(64)), 16)
    assert cache.lookup(h, 64) == 0
    cache.insert(h)
    assert cache.lookup(h, 64) == 63  # all 4 blocks cached; the last token is computed anyway
    assert cache.lookup(h[:2] + (123,), 100) == 32
    assert (cache.queried_tokens, cache.hit_tokens) == (64 + 64 + 100, 63 + 32)


def test_lru_evicts_the_least_recently_used_blocks():
    cache = PrefixCache(1, 3)
    cache.insert((1, 2, 3))
    cache.lookup((1,), 5)  # 1 is now the most recent
    cache.insert((4,))
    assert len(cache) == 3 and cache.lookup((2,), 5) == 0 and cache.lookup((1,), 5) == 1


def ttft_steps(engine: Engine, req: SimRequest) -> tuple[int, float]:
    """Steps and simulated seconds until ``req`` emits its first token (alone on the engine)."""
    engine.submit(req)
    t = 0.0
    for steps in range(1, 10_000):
        d, events = engine.step()
        t += d
        if any(r is req for r, _, _ in events):
            while not engine.idle:
                engine.step()
            return steps, t
    raise AssertionError("no first token")


@pytest.mark.parametrize("cached", [True, False])
def test_second_turn_prefills_only_its_new_tokens_when_caching(cached):
    params = EngineParams(step_base_s=0.001, step_per_seq_s=0.0, step_per_prefill_token_s=1e-5,
                          prefill_chunk_tokens=100_000, prefix_cache_blocks=1000 if cached else 0)
    engine = Engine(params)
    turn1 = list(range(2000))
    turn2 = turn1 + list(range(5000, 5200))  # the history resent plus a new message
    first = SimRequest(len(turn1), 4, prefix_hashes=block_hashes(turn1, 16))
    second = SimRequest(len(turn2), 4, prefix_hashes=block_hashes(turn2, 16))
    _, t1 = ttft_steps(engine, first)
    _, t2 = ttft_steps(engine, second)
    assert t1 == pytest.approx(0.001 + 2000e-5)
    if cached:  # 2000 = 125 blocks cached: 200 new tokens to prefill
        assert t2 == pytest.approx(0.001 + 200e-5)
    else:
        assert t2 == pytest.approx(0.001 + 2200e-5)


def test_request_parse_gives_ids_only_when_asked():
    body = b'{"prompt": [5, 6, 7], "max_tokens": 2}'
    assert parse(body, False, 100, 10).prompt_ids is None
    assert parse(body, False, 100, 10, want_ids=True).prompt_ids == [5, 6, 7]
    chat = b'{"messages": [{"role": "user", "content": "a b"}, {"role": "user", "content": "c"}], "max_tokens": 2}'
    ids = parse(chat, True, 100, 10, want_ids=True).prompt_ids
    assert len(ids) == 3 and ids[:2] == parse(chat.replace(b'"c"', b'"d"'), True, 100, 10, want_ids=True).prompt_ids[:2]


@pytest.mark.integration
def test_http_chat_turns_hit_the_cache_and_the_server_says_so():
    """Over HTTP: a resent chat history is served from the cache (vLLM's hit/query counters)."""

    from prometheus_client.parser import text_string_to_metric_families

    from loadgen.sim.launch import running_sim
    from tests.support.raw_client import request

    def counters(url):
        text = request(url, "GET", "/metrics").body.decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

    history = [{"role": "user", "content": " ".join(["the"] * 40 + ["of"] * 40)}]
    with running_sim("--preset", "fixed", "--timing", "engine", "--prefix-cache-tokens", "100000") as sim:
        for _ in range(2):
            body = {"messages": history, "max_tokens": 2, "ignore_eos": True}
            resp = request(sim.url, "POST", "/v1/chat/completions", body)
            assert resp.status == 200
            history = history + [{"role": "assistant", "content": "x y"}, {"role": "user", "content": "and"}]
        c = counters(sim.url)
    # turn 1: 80 tokens queried, none cached; turn 2: 83 queried, its first 80 = 5 blocks cached
    assert c["vllm:prefix_cache_queries_total"] == 80 + 83
    assert c["vllm:prefix_cache_hits_total"] == 80
