"""Parse and validate an OpenAI completion request body into what the simulator needs.

Errors raise ``BadRequest`` with a message shaped like vLLM's, answered as HTTP 400 with an
OpenAI-style error body. Token counting follows ``loadgen.sim.tokens`` (one token per word; one per
ID for token-ID prompts).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from loadgen.sim.tokens import count_text, messages_text, text_token_ids


class BadRequest(Exception):
    pass


@dataclass
class GenParams:
    chat: bool
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    prompt_ids: list[int] | None = None  # only when asked (prefix caching): IDs, or one per word
    thinking: bool = True  # chat_template_kwargs.enable_thinking (Qwen3-style templates); absent: on
    model: str | None = None  # the body's ``model`` (None: absent or not text)


def prompt_token_ids(obj: dict, chat: bool) -> list[int]:
    """The prompt as token IDs (already validated by ``prompt_length``): a token-ID prompt as is,
    text by ``loadgen.sim.tokens.text_token_ids`` (chat: every message's text, in order)."""
    if chat:
        return text_token_ids(messages_text(obj.get("messages")))
    prompt = obj.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    return text_token_ids(prompt) if isinstance(prompt, str) else list(prompt)


def _int(obj: dict, key: str, default: int | None) -> int | None:
    value = obj.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{key}' must be an integer, got {value!r}")
    return value


def _bool(obj: dict, key: str) -> bool:
    value = obj.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"'{key}' must be a boolean, got {value!r}")
    return value


def prompt_length(obj: dict, chat: bool) -> int:
    """Prompt tokens of a completions ``prompt`` (IDs or text) or of chat ``messages``."""
    if chat:
        try:
            return count_text(messages_text(obj.get("messages")))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
    prompt = obj.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return count_text(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt)
    raise BadRequest("'prompt' must be a string or a list of token IDs (batched prompts are not supported)")


def parse(body: bytes, chat: bool, max_model_len: int, default_max_tokens: int,
          want_ids: bool = False) -> GenParams:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("request body must be a JSON object")
    prompt = prompt_length(obj, chat)
    if prompt < 1:
        raise BadRequest("The prompt cannot be empty")
    n = _int(obj, "n", 1)
    if n != 1:
        raise BadRequest(f"'n' must be 1 in the simulator, got {n}")
    max_tokens = _int(obj, "max_completion_tokens", None) if chat else None
    if max_tokens is None:
        max_tokens = _int(obj, "max_tokens", None)
    if max_tokens is None:
        max_tokens = max(1, min(default_max_tokens, max_model_len - prompt))
    if max_tokens < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {max_tokens}")
    min_tokens = _int(obj, "min_tokens", 0)
    if not 0 <= min_tokens <= max_tokens:
        raise BadRequest(f"min_tokens must be in [0, max_tokens={max_tokens}], got {min_tokens}")
    if prompt + max_tokens > max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt + max_tokens} tokens ({prompt} in the {'messages' if chat else 'prompt'}, "
            f"{max_tokens} in the completion). Please reduce the length of the "
            f"{'messages' if chat else 'prompt'} or completion.")
    opts = obj.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest(f"'stream_options' must be an object, got {opts!r}")
    return GenParams(chat=chat, prompt_tokens=prompt, max_tokens=max_tokens, min_tokens=min_tokens,
                     ignore_eos=_bool(obj, "ignore_eos"), stream=_bool(obj, "stream"),
                     include_usage=_bool(opts, "include_usage"),
                     continuous_usage=_bool(opts, "continuous_usage_stats"),
                     prompt_ids=prompt_token_ids(obj, chat) if want_ids else None, thinking=_thinking(obj),
                     model=obj["model"] if isinstance(obj.get("model"), str) else None)


def _thinking(obj: dict) -> bool:
    """``chat_template_kwargs.enable_thinking``, True when absent (a reasoning model thinks by default)."""
    kwargs = obj.get("chat_template_kwargs")
    if kwargs is None:
        return True
    if not isinstance(kwargs, dict):
        raise BadRequest(f"'chat_template_kwargs' must be an object, got {kwargs!r}")
    value = kwargs.get("enable_thinking", True)
    if not isinstance(value, bool):
        raise BadRequest(f"'chat_template_kwargs.enable_thinking' must be a boolean, got {value!r}")
    return value
