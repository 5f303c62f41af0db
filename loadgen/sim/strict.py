"""Refusals of servers stricter than vLLM and SGLang, so the client's adaptations can be tested.

Pure: a request body (parsed JSON) in, a ``Refusal`` out (its status, body, and whether it is sent
inside a 200 event stream), or None to serve it.
Each mimics a real server's answer, as met by users (see issue "first contact with real servers"):

- ``reject_fields`` (names, comma-separated): a server validating its schema strictly answers 422
  ``{"detail": "Unexpected fields in the request: {'ignore_eos', 'min_tokens'}"}`` naming those
  present (top level, or inside ``stream_options``);
- ``prompt_token_ids = "reject"``: a server that takes only string prompts answers 400 with a
  pydantic-style ``detail`` list ("Input should be a valid string");
- ``vocab_size`` > 0: a token ID >= vocab_size is refused as the flavor's server does: llama.cpp
  (and SGLang) with HTTP 400 "Prompt contains invalid tokens"; vLLM 0.32 names the largest ID,
  ``"Token id N is out of vocabulary"`` (``BadRequestError``, code 400), and a streamed request gets
  it as **HTTP 200 with one error event then [DONE]** (tests/fixtures/vllm/completion_refused.sse).
"""

from __future__ import annotations

from typing import NamedTuple


class Refusal(NamedTuple):
    status: int
    body: dict
    in_stream: bool = False  # HTTP 200, then the body as one SSE event and [DONE] (vLLM streaming)


def refusal(obj: dict, chat: bool, reject_fields: str, prompt_token_ids: str, vocab_size: int,
            flavor: str = "llamacpp") -> Refusal | None:
    banned = [f.strip() for f in reject_fields.split(",") if f.strip()]
    if banned:
        present = set(obj) | set(obj.get("stream_options") or {})
        named = sorted(f for f in banned if f in present)
        if named:
            listed = ", ".join(repr(f) for f in named)
            return Refusal(422, {"detail": f"Unexpected fields in the request: {{{listed}}}"})
    prompt = obj.get("prompt")
    if chat or not isinstance(prompt, list) or not prompt:
        return None
    ids = prompt[0] if isinstance(prompt[0], list) else prompt
    if not all(isinstance(t, int) for t in ids):
        return None
    if prompt_token_ids == "reject":
        return Refusal(400, {"detail": [{"type": "string_type", "loc": ["body", "prompt"],
                                         "msg": "Input should be a valid string", "input": ids[:3]}]})
    if vocab_size and any(t >= vocab_size or t < 0 for t in ids):
        if flavor == "vllm":
            return Refusal(400, {"error": {"message": f"Token id {max(ids)} is out of vocabulary",
                                           "type": "BadRequestError", "param": None, "code": 400}},
                           in_stream=bool(obj.get("stream")))
        return Refusal(400, {"error": {"code": 400, "message": "Prompt contains invalid tokens",
                                       "type": "invalid_request_error"}})
    return None
