"""The simulator's tokenizer rule: one token per whitespace-separated word.

Used for text prompts (completions with a string prompt, chat messages), for ``POST /tokenize``
and for the generated text, so a client that calibrates prompts through ``/tokenize`` gets exactly
the count the server will report in ``usage.prompt_tokens``. Chat messages count the words of every
text content, with no chat-template overhead. Token-ID prompts (a list of ints) count one token
per ID. Generated text is ``" word"`` per token, so re-counting it by this rule gives the token
count too.
"""

from __future__ import annotations

import zlib

VOCAB_SIZE = 151_936  # Qwen-sized ID space for the IDs /tokenize returns

_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an which not but "
    "have one all were they has can more when there their will would been its also into than time "
    "other some these two may only first over such then most new like any where after should "
    "through each just between many about out could well those both very make same under while"
).split()
# Generated token i of a request is WORD_BYTES[(offset + i) % len]: plain ASCII, no JSON escaping.
WORD_BYTES: tuple[bytes, ...] = tuple(b" " + w.encode() for w in _WORDS)


def count_text(text: str) -> int:
    """Tokens in ``text``: its whitespace-separated words."""
    return len(text.split())


def text_token_ids(text: str) -> list[int]:
    """Deterministic token IDs for ``text``, one per word (a stable hash of the word)."""
    return [zlib.crc32(w.encode()) % VOCAB_SIZE for w in text.split()]


def messages_text(messages: object) -> str:
    """All text content of OpenAI chat ``messages``; raises ValueError naming a bad shape."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list of {role, content} objects")
    parts: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg:
            raise ValueError(f"messages[{i}] must be an object with a 'role'")
        content = msg.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
        else:
            raise ValueError(f"messages[{i}].content must be a string or a list of parts")
    return "\n".join(parts)


def generated_text(offset: int, start: int, n: int) -> bytes:
    """The text of generated tokens ``start .. start + n - 1`` of a request with ``offset``."""
    words, size = WORD_BYTES, len(WORD_BYTES)
    if n == 1:
        return words[(offset + start) % size]
    return b"".join(words[(offset + i) % size] for i in range(start, start + n))
