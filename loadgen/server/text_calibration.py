"""How the server counts a text prompt's tokens: words -> ``usage.prompt_tokens``, asked of the server.

Text prompts (chat messages, or completions on a server that refuses token IDs) cannot be counted
without the server's tokenizer, which we never download. So we ask: one non-streaming request of
w words, 1 output token, and read its ``usage.prompt_tokens``. For the one fixed length, the exact
word count (``fit_word_count``); for lengths that vary, tokens = a x words + b through two
requests (``TextFit.from_two``). Cached per process and endpoint: every user of a process
shares one calibration (a lock keeps the first users from each asking).
"""

from __future__ import annotations

from gevent.lock import Semaphore

from loadgen.wire.client import StreamClient
from loadgen.wire.endpoints import PATHS
from loadgen.workload.asks import TextFit
from loadgen.workload.prompts import ChatPrompts, fit_word_count

FIT_WORDS = (64, 512)  # the two text lengths asked for a calibration over many lengths
_lock = Semaphore()
_text_words: dict[tuple[str, int], int] = {}
_text_fits: dict[str, TextFit] = {}


def _measure(client: StreamClient, scenario, model: str):
    """words -> the server's usage.prompt_tokens for a text prompt of that many words."""
    texts = ChatPrompts(1, (scenario.prompt.seed, 0xCA1))

    def measure(words: int) -> int:
        body = {"model": model, "max_tokens": 1, "stream": False}
        if scenario.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": texts.text(words)}]
        else:
            body["prompt"] = texts.text(words)
        return int(client.post_json(PATHS[scenario.endpoint], body)["usage"]["prompt_tokens"])

    return measure


def text_word_count(client: StreamClient, scenario, model: str) -> int:
    """Words per text prompt so the server counts exactly ``input_tokens`` (cached per process and
    endpoint): chat messages, or a completions prompt sent as text (a server that refuses token IDs)."""
    target, endpoint = scenario.input_tokens, scenario.endpoint
    with _lock:
        if (endpoint, target) not in _text_words:
            _text_words[(endpoint, target)], _ = fit_word_count(target, _measure(client, scenario, model))
        return _text_words[(endpoint, target)]


def text_fit(client: StreamClient, scenario, model: str) -> TextFit:
    """The text calibration of this process: exact for the one fixed length (``fit_word_count``),
    else tokens = a x words + b through two requests (loadgen.workload.asks.TextFit)."""
    if scenario.input.dist == "fixed" and not scenario.workload.dataset and scenario.workload.turns == 1:
        return TextFit(1.0, 0.0, {scenario.input_tokens: text_word_count(client, scenario, model)})
    with _lock:
        if scenario.endpoint not in _text_fits:
            measure = _measure(client, scenario, model)
            w1, w2 = FIT_WORDS
            _text_fits[scenario.endpoint] = TextFit.from_two(w1, measure(w1), w2, measure(w2))
        return _text_fits[scenario.endpoint]
