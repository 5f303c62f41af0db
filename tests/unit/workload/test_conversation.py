"""Multi-turn conversations (pure): the history resent each turn, exact for token IDs, reset after
K turns or a failure; TTFT by turn kept per stage and merged exactly."""

from __future__ import annotations

import numpy as np

from loadgen.stats.records import RequestResult
from loadgen.stats.stage_stats import StageStats
from loadgen.workload.asks import PromptMaker, TextFit, Workload
from loadgen.workload.conversation import Conversation
from loadgen.workload.lengths import LengthDist

FIXED = LengthDist("fixed", value=10)


def convo(kind: str = "token_ids", turns: int = 3) -> Conversation:
    fit = None if kind == "token_ids" else TextFit(1.0, 0.0)
    w = Workload(PromptMaker(kind, (1000, 30000), (0, 0, 1), fit=fit), FIXED, LengthDist("fixed", value=4), (0, 0, 1))
    return Conversation(w, turns)


def test_token_ids_grow_by_prompt_reply_and_new_message():
    c = convo()
    a0 = c.next()
    assert isinstance(a0.prompt, np.ndarray) and a0.prompt.dtype == np.int32  # TokenIds: 4 bytes a token
    assert a0.sent().prompt is None and a0.sent().output_tokens == a0.output_tokens
    c.answered(a0.sent(), True, 4)  # as users answer: the body carried the prompt, the conversation kept it
    a1 = c.next()
    assert a1.turn == 1 and a1.prompt[:10].tolist() == a0.prompt.tolist() and len(a1.prompt) == 10 + 4 + 10 == a1.input_tokens
    c.answered(a1.sent(), True, 4)
    a2 = c.next()
    assert a2.turn == 2 and a2.prompt[:24].tolist() == a1.prompt.tolist() and a2.input_tokens == 38
    c.answered(a2, True, 4)  # the K-th turn: a new conversation starts
    a3 = c.next()
    assert a3.turn == 0 and len(a3.prompt) == 10 and a3.prompt.tolist() != a0.prompt.tolist()


def test_a_failed_turn_ends_the_conversation():
    c = convo()
    a0 = c.next()
    c.answered(a0, True, 4)
    a1 = c.next()
    c.answered(a1, False, 0)
    assert c.next().turn == 0


def test_chat_resends_messages_with_the_reply_as_assistant():
    c = convo("chat")
    a0 = c.next()
    c.answered(a0, True, 4)
    a1 = c.next()
    roles = [m["role"] for m in a1.prompt]
    assert roles == ["user", "assistant", "user"] and a1.prompt[0] == a0.prompt[0]
    assert len(a1.prompt[1]["content"].split()) == 4 and a1.input_tokens is None and a0.input_tokens == 10


def _ok(ttft_s: float) -> RequestResult:
    e = np.empty(0)
    return RequestResult(True, None, "", 10, 4, False, ttft_s, ttft_s + 0.1, None, None, e, e, e, "length", 4)


def test_ttft_by_turn_rows_merge_and_wire():
    a, b = StageStats(), StageStats()
    a.add_result(_ok(0.1), 10, 4, turn=0)
    a.add_result(_ok(0.3), 10, 4, turn=2)
    b.add_result(_ok(0.1), 10, 4, turn=0)
    a.merge(StageStats.from_message(b.to_message()))
    row = a.row(1.0)
    assert row["requests_by_turn"] == [2, 0, 1]
    assert row["ttft_p50_s_by_turn"][1] is None and abs(row["ttft_p50_s_by_turn"][2] - 0.3) < 0.01
    assert "ttft_p50_s_by_turn" not in StageStats().row(1.0)  # single requests: rows unchanged
