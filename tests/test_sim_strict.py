"""The simulator's stricter-server modes answer like the real servers they mimic (pure)."""

from __future__ import annotations

from loadgen.sim.strict import refusal


def test_reject_fields_names_only_those_present():
    obj = {"prompt": [1], "ignore_eos": True, "min_tokens": 3, "stream_options": {"continuous_usage_stats": True}}
    status, body = refusal(obj, False, "ignore_eos,min_tokens,continuous_usage_stats", "accept", 0)
    assert status == 422
    assert body == {"detail": "Unexpected fields in the request: {'continuous_usage_stats', 'ignore_eos', 'min_tokens'}"}
    assert refusal({"prompt": [1], "max_tokens": 2}, False, "ignore_eos,min_tokens", "accept", 0) is None


def test_string_prompts_only_and_vocabulary():
    status, body = refusal({"prompt": [5, 6]}, False, "", "reject", 0)
    assert status == 400 and body["detail"][0]["msg"] == "Input should be a valid string"
    assert refusal({"prompt": "text"}, False, "", "reject", 0) is None
    assert refusal({"messages": []}, True, "", "reject", 0) is None
    status, body = refusal({"prompt": [5, 8192]}, False, "", "accept", 8192)
    assert status == 400 and body["error"]["message"] == "Prompt contains invalid tokens"
    assert refusal({"prompt": [5, 8191]}, False, "", "accept", 8192) is None
