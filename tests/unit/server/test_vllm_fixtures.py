"""The parsers against what a real vLLM sent (tests/fixtures/vllm, vLLM 0.32.0): no vLLM needed.

Each stream is replayed through ``RequestRecord`` one SSE event at a time, 10 ms apart; each
``/metrics`` text through the start check's and the window's readers. tests/integration/test_vllm.py checks
the same things against the running server; these keep them pinned where vLLM is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.errors import STREAM_ERROR, is_client_refusal
from loadgen.server.edges import Edge
from loadgen.server.replies import capacity_from_vllm_metrics, flavor_of, parse_metrics, parse_models
from loadgen.server.window_spec import spec_decode
from loadgen.stats.records import RequestRecord
from loadgen.wire.compat import refused_token_id
from loadgen.wire.sse import SSEDecoder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


def replay(name: str, endpoint: str = CHAT, gap_s: float = 0.01):
    rec = RequestRecord(0.0, 0, endpoint)
    payloads = SSEDecoder().feed((FIXTURES / name).read_bytes())
    for i, payload in enumerate(payloads):
        rec.on_payload(payload, (i + 1) * gap_s)
    return rec.finish((len(payloads) + 1) * gap_s, eof=True)


def test_a_completion_stream_one_token_a_chunk_with_final_usage():
    r = replay("completion.sse", COMPLETIONS)
    assert r.ok and (r.completion_tokens, r.chunks, r.tokens_estimated) == (5, 5, False)
    assert r.prompt_tokens == 4 and r.cached_prompt_tokens == 0  # vLLM sends 0 on a miss


def test_the_in_stream_refusal_is_a_client_refusal_naming_the_id():
    r = replay("completion_refused.sse", COMPLETIONS)
    assert (r.error_kind, r.error_status) == (STREAM_ERROR, 400) and is_client_refusal(r.error_kind, r.error_status)
    assert refused_token_id(r.error_message) == 29386


def test_reasoning_streams_as_delta_reasoning_and_is_counted_though_usage_says_zero():
    """vLLM 0.32's usage has completion_tokens_details.reasoning_tokens 0 while 8 tokens streamed as
    ``delta.reasoning``: the count comes from the stream, and the answer starts after them. This
    stream was recorded without per-chunk usage and ``</think>`` is a token without a chunk (30
    tokens, 29 chunks), so the 8 are apportioned from the final total (one token a chunk here)."""
    text = (FIXTURES / "chat_reasoning.sse").read_text()
    assert '"reasoning":" first"' in text and '"reasoning_tokens":0' in text
    r = replay("chat_reasoning.sse")
    assert r.ok and r.completion_tokens == 30 and r.chunks == 29
    assert (r.reasoning_tokens, r.reasoning_source) == (8, "apportioned")
    assert r.ttfat_s > r.ttft_s  # the first token of any kind (reasoning) comes first


def test_speculative_chunks_carry_several_tokens():
    """n-gram drafts accepted: 40 tokens in fewer chunks (4 tokens a chunk once the cycle repeats).
    Without per-chunk usage the reasoning count is an estimate: the total spread evenly over the
    chunks gives the 8 one-token reasoning chunks 10 tokens. A run sends continuous_usage_stats to
    vLLM, whose per-chunk usage makes the count exact (tests/integration/test_vllm.py: 8 a request)."""
    r = replay("chat_reasoning_spec.sse")
    assert r.ok and r.completion_tokens == 40 and r.chunks < 35
    assert (r.reasoning_tokens, r.reasoning_source) == (10, "apportioned")


def test_a_prefix_cache_hit_is_whole_blocks_of_the_prompt():
    r = replay("chat_cache_hit.sse")
    assert (r.prompt_tokens, r.cached_prompt_tokens) == (94, 64)  # two 32-token blocks


def test_the_start_check_reads_vllm_from_its_models_and_metrics():
    models = parse_models(json.loads((FIXTURES / "models.json").read_text()))
    assert (models.model, models.flavor, models.max_model_len, models.n_vocab) == ("tiny", "vllm", 2048, None)
    samples = parse_metrics((FIXTURES / "metrics.txt").read_text())
    assert flavor_of(samples) == "vllm"
    ((labels, _),) = samples["vllm:cache_config_info"]
    assert capacity_from_vllm_metrics(samples) == int(labels["num_gpu_blocks"]) * int(labels["block_size"]) == 1048576


def test_the_speculative_counters_and_their_per_position_series():
    closed = parse_metrics((FIXTURES / "metrics_spec.txt").read_text())
    opened = {name: [(lb, 0.0) for lb, _ in series] for name, series in closed.items()}
    out = spec_decode("vllm", Edge(0.0, opened), Edge(1.0, closed))
    drafts = sum(v for _, v in closed["vllm:spec_decode_num_drafts_total"])
    accepted = sum(v for _, v in closed["vllm:spec_decode_num_accepted_tokens_total"])
    assert out["spec_accept_length"] == pytest.approx(1 + accepted / drafts) and accepted > 0
    assert len(out["spec_acceptance_by_position"]) == 3
    assert 1 + sum(out["spec_acceptance_by_position"]) == pytest.approx(out["spec_accept_length"])
