"""What each request asks for: its prompt, the input tokens we expect, the output tokens we force.

Pure: no I/O, no clock (the text calibration asks the server: loadgen.server.text_calibration).
A ``Workload`` hands out ``Ask``s one at a time from one of two sources:

- **synthetic** (default): (input, output) lengths drawn from the scenario's ``input:`` /
  ``output:`` distributions (loadgen.workload.lengths.LengthSampler, seeded per (seed, process, user)), and
  a prompt of that length made by ``PromptMaker``;
- **dataset** (``--dataset``): the process's disjoint share of the file (loadgen.workload.dataset.share),
  one request after the other, cycling. A line with ``input_tokens`` gets a synthesized prompt of
  that length (``hash_ids``: shared blocks of token IDs, or of words for text prompts,
  ``PromptMaker.hashed``); a line
  with ``prompt`` / ``messages`` is sent as given and its input length is whatever the server's
  usage says (expected None: no mismatch verdict). A line without ``output_tokens`` draws one from
  the ``output:`` distribution.

Prompt lengths (``PromptMaker``): token-ID prompts have exactly n tokens by construction. Text
prompts (chat, or completions on a server that refuses token IDs) are calibrated against the
server: ``TextFit`` holds tokens = a x words + b fitted from two measured lengths, so words(n) =
max(1, round((n - b) / a)); the fixed-length case keeps the exact word count found by
``fit_word_count`` for its one length (``TextFit.exact``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from loadgen.workload.dataset import DatasetRequest
from loadgen.workload.lengths import LengthDist, LengthSampler
from loadgen.workload.prompts import TOKEN_ID_DTYPE, WORDS, TokenIdPrompts, TokenIds, hashed_prefix_prompt

_VOCAB = np.array(WORDS)  # shared by every user's PromptMaker (read only)


@dataclass(frozen=True)
class Ask:
    """One request as planned. ``prompt`` is what the body carries (token IDs as ``TokenIds``, text,
    or chat messages); ``input_tokens`` the prompt tokens expected in the server's usage (None: unknown,
    the prompt was given); ``output_tokens`` the output length forced."""

    prompt: object
    input_tokens: int | None
    output_tokens: int
    turn: int = 0  # 0-based turn of a conversation (loadgen.workload.conversation)
    timestamp_ms: float | None = None  # a trace line's send time, ms from the trace's start
    line: int | None = None  # the dataset line it came from

    def sent(self) -> Ask:
        """This Ask once its body is built: without the prompt, which the body carries. A user
        holds its request while it streams; holding the prompt too would double that."""
        return replace(self, prompt=None)


@dataclass(frozen=True)
class TextFit:
    """Server tokens of a text prompt of w words: a x w + b (b: the chat template's constant);
    ``exact`` word counts measured exactly for some lengths (the fixed case)."""

    a: float
    b: float
    exact: dict[int, int] = field(default_factory=dict)

    def words(self, n_tokens: int) -> int:
        if n_tokens in self.exact:
            return self.exact[n_tokens]
        return max(1, round((n_tokens - self.b) / (self.a or 1.0)))

    @classmethod
    def from_two(cls, w1: int, t1: int, w2: int, t2: int) -> TextFit:
        """The line through two measurements (w words -> t tokens)."""
        a = (t2 - t1) / (w2 - w1) if w2 != w1 else 1.0
        return cls(a or 1.0, t1 - (a or 1.0) * w1)


class PromptMaker:
    """Prompts of a requested length for one user (seeded by ``seed_key``).

    ``kind``: ``token_ids`` (completions with IDs), ``text`` (completions with a text prompt) or
    ``chat`` (one user message). ``fit`` is required for the text kinds."""

    def __init__(self, kind: str, id_range: tuple[int, int], seed_key: tuple, shared_prefix_tokens: int = 0,
                 shared_seed: int = 0, fit: TextFit | None = None):
        if kind != "token_ids" and fit is None:
            raise ValueError("text prompts need a TextFit (calibration against the server)")
        self.kind, self.id_range, self.fit = kind, tuple(id_range), fit
        self._ids = TokenIdPrompts(1, self.id_range, seed_key, shared_prefix_tokens, shared_seed)
        self._seed_key = seed_key
        self._rng_made: np.random.Generator | None = None

    @property
    def _rng(self) -> np.random.Generator:
        """Text words, replies and trace tails (made on first use: ~4 KB that a token-ID user of
        fixed lengths never needs)."""
        if self._rng_made is None:
            self._rng_made = np.random.default_rng(np.random.SeedSequence([*self._seed_key, 0x7E47]))
        return self._rng_made

    def text(self, words: int) -> str:
        return " ".join(_VOCAB[self._rng.integers(0, len(_VOCAB), words)].tolist())

    def ids(self, n_tokens: int) -> TokenIds:
        return self._ids.next(n_tokens)

    def fresh_ids(self, n_tokens: int) -> TokenIds:
        """IDs with no shared prefix (a conversation's synthetic reply)."""
        lo, hi = self.id_range
        return self._rng.integers(lo, hi, n_tokens, dtype=np.int64).astype(TOKEN_ID_DTYPE)

    def make(self, n_tokens: int) -> tuple[object, int | None]:
        """(prompt, expected input tokens) for a prompt of ``n_tokens``."""
        if self.kind == "token_ids":
            return self.ids(n_tokens), n_tokens
        return self.as_prompt(self.text(self.fit.words(n_tokens))), n_tokens

    def as_prompt(self, text: str) -> object:
        """A text prompt in this kind's form: one user message (chat), else the text itself."""
        return [{"role": "user", "content": text}] if self.kind == "chat" else text

    def hashed(self, n_tokens: int, hash_ids: tuple[int, ...], block_tokens: int, salt: int) -> object:
        """A prompt of ``n_tokens`` whose block i is a function of ``hash_ids[i]`` alone
        (``hashed_prefix_prompt``). Text kinds: the same blocks over the word list, each of
        round(block_tokens / a) words (a = the calibration's tokens per word; every word is one
        token, so equal leading blocks are an equal token prefix), fit.words(n_tokens) in all."""
        if self.kind == "token_ids":
            return hashed_prefix_prompt(n_tokens, hash_ids, block_tokens, self.id_range, self._rng, salt)
        block_words = max(1, round(block_tokens / (self.fit.a or 1.0)))
        picks = hashed_prefix_prompt(self.fit.words(n_tokens), hash_ids, block_words, (0, len(_VOCAB)), self._rng, salt)
        return self.as_prompt(" ".join(_VOCAB[picks].tolist()))


class DatasetCursor:
    """A process's share of a dataset, handed out in order, cycling (shared by its users)."""

    def __init__(self, requests: list[DatasetRequest]):
        if not requests:
            raise ValueError("this process's dataset share is empty: fewer lines than load processes")
        self.requests, self._i = requests, 0

    def next(self) -> DatasetRequest:
        r = self.requests[self._i % len(self.requests)]
        self._i += 1
        return r


def sender_lengths(inputs: LengthDist, outputs: LengthDist, seed_key: tuple) -> LengthSampler:
    """One sender's (input, output) lengths, seeded by its key (prompt.seed, process, user number):
    the run's users and the what-if's virtual users (loadgen.whatif.virtual_workload) draw the same ones."""
    return LengthSampler(inputs, outputs, (*seed_key, 0x1E9))


def line_output(r: DatasetRequest, default_output: int | None, lengths: LengthSampler) -> int:
    """A dataset line's forced output length: its own ``output_tokens``, else ``default_output``,
    else a draw from the sender's output distribution."""
    return r.output_tokens or default_output or lengths.next()[1]


class Workload:
    """The Asks of one user: synthetic lengths, or a dataset cursor (module docstring)."""

    def __init__(self, maker: PromptMaker, inputs: LengthDist, outputs: LengthDist, seed_key: tuple,
                 cursor: DatasetCursor | None = None, block_tokens: int = 512, hash_salt: int = 0):
        self.maker, self.cursor = maker, cursor
        self.block_tokens, self.hash_salt = block_tokens, hash_salt
        self._lengths = sender_lengths(inputs, outputs, seed_key)

    def answered(self, ask: Ask, ok: bool, completion_tokens: int | None) -> None:
        """Single requests remember nothing (loadgen.workload.conversation.Conversation does)."""

    def next(self) -> Ask:
        n_in, n_out = self._lengths.next()
        if self.cursor is None:
            prompt, expected = self.maker.make(n_in)
            return Ask(prompt, expected, n_out)
        return self.from_line(self.cursor.next(), n_out)

    def from_line(self, r: DatasetRequest, default_output: int | None = None) -> Ask:
        """The Ask of one dataset line (module docstring); no output_tokens: ``default_output``,
        else a draw from the output distribution."""
        out = line_output(r, default_output, self._lengths)
        if r.input_tokens is None:
            prompt = np.array(r.prompt, dtype=np.int64) if isinstance(r.prompt, tuple) else r.prompt  # any ID
            if r.messages is not None:
                prompt = [dict(m) for m in r.messages]
            elif self.maker.kind == "chat":
                prompt = self.maker.as_prompt(r.prompt)
            expected = len(r.prompt) if isinstance(r.prompt, tuple) else None
            return Ask(prompt, expected, out, timestamp_ms=r.timestamp_ms, line=r.line)
        if r.hash_ids:
            prompt = self.maker.hashed(r.input_tokens, r.hash_ids, self.block_tokens, self.hash_salt)
            return Ask(prompt, r.input_tokens, out, timestamp_ms=r.timestamp_ms, line=r.line)
        prompt, expected = self.maker.make(r.input_tokens)
        return Ask(prompt, expected, out, timestamp_ms=r.timestamp_ms, line=r.line)
