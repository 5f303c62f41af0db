"""Synthetic prompts of exactly N tokens, with no tokenizer.

Completions: the prompt is a list of token IDs, which vLLM and SGLang accept as-is, so its length is
exactly N by construction. A token-ID prompt is held as an int32 numpy array (``TokenIds``: 4 bytes
a token; a list of Python ints costs ~36, and every user holds its prompt while the request is in
flight); the request body writes it as a JSON array (``loadgen.wire.compat.build_body``). IDs are drawn
as int64 and stored as int32 (every vocabulary fits), so the same seed gives the same IDs as when
prompts were lists. IDs are drawn uniformly from ``token_id_range`` by a seeded generator
that is unique per (seed, process, user), so every request differs and prefix caching cannot flatter
the server; ``shared_prefix_tokens`` leading IDs are common to all requests when a user wants to
measure prefix caching on purpose.

Chat: the server applies a chat template, so the prompt is text. Words from a list of common English
words (one BPE token each in the usual vocabularies, with their leading space) are calibrated
against the server's own ``usage.prompt_tokens``: ``fit_word_count`` solves tokens = a * words + b
from probe requests and corrects the result until the count is exact. Per-request differences that
remain are reported as input mismatches in the summary.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

TokenIds = np.ndarray  # a token-ID prompt: a 1-D int32 array
TOKEN_ID_DTYPE = np.int32

# Common short English words; each is a single token (with its leading space) in the BPE
# vocabularies of Llama, Qwen, Mistral and GPT tokenizers.
WORDS = (
    "the of and to in is was for on that with as by at from his her but not are this have had "
    "they you were which one all she when there can been has more will their if would so no out "
    "up into them time some could other then what only new about over two may first these any "
    "people like now also after made back well years way even work just must down many life "
    "state world day where most still long great see own take part much own good each city house "
    "water place name line small year war old found high right head under never last left side "
    "power end young point few number country group family case area hand home night school"
).split()


class TokenIdPrompts:
    """Seeded token-ID prompts of exactly ``n_tokens`` for /v1/completions."""

    def __init__(self, n_tokens: int, id_range: tuple[int, int], seed_key: tuple[int, ...],
                 shared_prefix_tokens: int = 0, shared_seed: int = 0):
        self.n_tokens = n_tokens
        self.lo, self.hi = id_range
        self._rng = np.random.default_rng(np.random.SeedSequence(list(seed_key)))
        prefix_rng = np.random.default_rng(shared_seed)
        self._prefix = prefix_rng.integers(self.lo, self.hi, shared_prefix_tokens, dtype=np.int64)

    def next(self, n_tokens: int | None = None) -> TokenIds:
        """A prompt of ``n_tokens`` (default: the constructor's), the shared prefix first."""
        n = self.n_tokens if n_tokens is None else n_tokens
        tail = self._rng.integers(self.lo, self.hi, max(n - len(self._prefix), 0), dtype=np.int64)
        if len(self._prefix):
            tail = np.concatenate([self._prefix[:n], tail])
        return tail.astype(TOKEN_ID_DTYPE)


PROBE_SEED = 0x9B0BE
PROBE_TEXT = "Say something."


def probe_prompt(scenario, prompt_kind: str, token_id_range: tuple[int, int] | None):
    """The start check's probe prompt, of the run's kind (loadgen.server.start_check.probe_request): chat
    messages or a short text, else token IDs of the run's length (its smallest when lengths vary,
    so it fits any context the run fits), from ``token_id_range`` (the server's fitted one) or the
    scenario's."""
    if scenario.endpoint == "chat":
        return [{"role": "user", "content": PROBE_TEXT}]
    if prompt_kind == "text":
        return PROBE_TEXT
    id_range = token_id_range or tuple(scenario.prompt.token_id_range)
    n = scenario.input_tokens if scenario.input.dist == "fixed" else scenario.input.min
    return TokenIdPrompts(n, id_range, (scenario.prompt.seed, PROBE_SEED)).next()


def fit_word_count(target: int, measure: Callable[[int], int], max_rounds: int = 6) -> tuple[int, int]:
    """Find the word count whose prompt the server counts as ``target`` tokens.

    ``measure(words)`` returns the server's ``usage.prompt_tokens`` for a prompt of that many words.
    Two measured lengths fit tokens = a * words + b (the chat template adds a constant b); then we step by
    the remaining difference until exact. Returns (words, measured tokens of the last probe).
    """
    w1 = max(1, target // 2)
    w2 = max(w1 + 1, target)
    t1, t2 = measure(w1), measure(w2)
    slope = (t2 - t1) / (w2 - w1) or 1.0
    words = max(1, round(w2 + (target - t2) / slope))
    tokens = t2 if words == w2 else measure(words)
    for _ in range(max_rounds):
        if tokens == target:
            break
        step = round((target - tokens) / slope) or (1 if tokens < target else -1)
        words = max(1, words + step)
        tokens = measure(words)
    return words, tokens


class ChatPrompts:
    """Seeded text prompts of a calibrated word count for /v1/chat/completions."""

    def __init__(self, words: int, seed_key: tuple[int, ...]):
        self.words = words
        self._rng = np.random.default_rng(np.random.SeedSequence(list(seed_key)))
        self._vocab = np.array(WORDS)

    def text(self, words: int | None = None) -> str:
        picks = self._rng.integers(0, len(self._vocab), words or self.words)
        return " ".join(self._vocab[picks].tolist())

    def next(self) -> list[dict]:
        return [{"role": "user", "content": self.text()}]


class TextPrompts(ChatPrompts):
    """The same calibrated text as a completions ``prompt`` string (a server that refuses token IDs)."""

    def next(self) -> str:  # type: ignore[override]
        return self.text()


def hashed_prefix_prompt(n_tokens: int, hash_ids: tuple[int, ...], block_tokens: int,
                         id_range: tuple[int, int], rng: np.random.Generator, salt: int = 0) -> TokenIds:
    """A token-ID prompt of exactly ``n_tokens`` whose block i is a function of ``hash_ids[i]`` alone
    (Mooncake traces: equal leading ids = a shared prefix, so a server's prefix cache sees what it saw
    in the trace). Tokens beyond the blocks the ids cover are fresh from ``rng``."""
    lo, hi = id_range
    blocks = [np.random.default_rng([salt & 0xFFFFFFFF, h & 0xFFFFFFFF, (h >> 32) & 0xFFFFFFFF])
              .integers(lo, hi, block_tokens, dtype=np.int64) for h in hash_ids]
    ids = np.concatenate(blocks)[:n_tokens] if blocks else np.empty(0, dtype=np.int64)
    if len(ids) < n_tokens:
        ids = np.concatenate([ids, rng.integers(lo, hi, n_tokens - len(ids), dtype=np.int64)])
    return ids.astype(TOKEN_ID_DTYPE)
