"""The simulator's stricter-server modes answer like the real servers they mimic (pure)."""

from __future__ import annotations

from loadgen.sim.strict import refusal


def test_reject_fields_names_only_those_present():
    obj = {"prompt": [1], "ignore_eos": True, "min_tokens": 3, "stream_options": {"continuous_usage_stats": True}}
    status, body, _ = refusal(obj, False, "ignore_eos,min_tokens,continuous_usage_stats", "accept", 0)
    assert status == 422
    assert body == {"detail": "Unexpected fields in the request: {'continuous_usage_stats', 'ignore_eos', 'min_tokens'}"}
    assert refusal({"prompt": [1], "max_tokens": 2}, False, "ignore_eos,min_tokens", "accept", 0) is None


def test_string_prompts_only_and_vocabulary():
    status, body, _ = refusal({"prompt": [5, 6]}, False, "", "reject", 0)
    assert status == 400 and body["detail"][0]["msg"] == "Input should be a valid string"
    assert refusal({"prompt": "text"}, False, "", "reject", 0) is None
    assert refusal({"messages": []}, True, "", "reject", 0) is None
    status, body, _ = refusal({"prompt": [5, 8192]}, False, "", "accept", 8192)
    assert status == 400 and body["error"]["message"] == "Prompt contains invalid tokens"
    assert refusal({"prompt": [5, 8191]}, False, "", "accept", 8192) is None


def test_vllms_vocabulary_refusal_names_the_id_and_comes_inside_a_stream():
    """As vLLM 0.32 answered (tests/fixtures/vllm/completion_refused.sse): HTTP 200, one error event
    naming the largest ID, [DONE]; without streaming, a plain 400."""
    refused = refusal({"prompt": [5, 29386, 9000], "stream": True}, False, "", "accept", 8194, "vllm")
    assert refused.in_stream and refused.status == 400
    assert refused.body == {"error": {"message": "Token id 29386 is out of vocabulary", "type": "BadRequestError",
                                      "param": None, "code": 400}}
    assert not refusal({"prompt": [5, 29386]}, False, "", "accept", 8194, "vllm").in_stream
    assert not refusal({"prompt": [5, 29386], "stream": True}, False, "", "accept", 8194, "llamacpp").in_stream
