"""Multi-turn sessions (``--turns K``): a user holds a conversation of K turns. Pure: no I/O.

Turn t (0-based) sends the whole history plus a new user message drawn from the user's workload
(loadgen.workload.asks; its length from the ``input:`` distribution or the dataset line):

- completions with token IDs: the growing token list, history_t = prompt_{t-1} + reply_{t-1} and
  prompt_t = history_t + new_t, so its expected input is exactly len(prompt_t);
- chat: the message list, [..., user_{t-1}, assistant_{t-1}, user_t]; the template's tokens per
  message are the server's business, so turns after the first expect no particular input length;
- completions with text: the texts joined by spaces (expected input: only for the first turn).

The reply is resent as synthetic tokens/words of its length (the server's usage, else the length
asked): the client keeps no generated text. A server's prefix cache therefore finds the previous
turn's *prompt* (the leading part of the history), which is what grows turn after turn. A failed
turn ends the conversation; after K turns a new one starts. A turn's history is the KV the guard
projects (loadgen.workload.mix: the sum over K turns, the longest history).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from loadgen.workload.asks import Ask, Workload


class Conversation:
    """The Asks of one user in K-turn conversations over ``workload`` (module docstring)."""

    def __init__(self, workload: Workload, turns: int):
        self.workload, self.turns = workload, turns
        self.turn = 0
        self.history = None  # what turn ``turn`` resends before its new message
        self._sent = None  # the prompt of the turn in flight (the caller may drop it from its Ask)

    def next(self) -> Ask:
        ask = self._turn_ask(self.workload.next())
        self._sent = ask.prompt
        return ask

    def _turn_ask(self, new: Ask) -> Ask:
        if self.turn == 0 or self.history is None:
            return replace(new, turn=0)
        kind = self.workload.maker.kind
        if kind == "token_ids" and isinstance(new.prompt, np.ndarray):
            prompt = np.concatenate([self.history, new.prompt])
            return replace(new, prompt=prompt, input_tokens=len(prompt), turn=self.turn)
        if kind == "chat":
            message = new.prompt if isinstance(new.prompt, list) else [{"role": "user", "content": str(new.prompt)}]
            return replace(new, prompt=self.history + message, input_tokens=None, turn=self.turn)
        return replace(new, prompt=f"{self.history} {new.prompt}", input_tokens=None, turn=self.turn)

    def answered(self, ask: Ask, ok: bool, completion_tokens: int | None) -> None:
        """The turn's outcome: the history grows by the prompt and its reply, or the conversation
        ends (a failure, or the K-th turn). The prompt is the one this conversation sent (``ask``
        may come back without it, loadgen.workload.asks.Ask.sent)."""
        sent, self._sent = self._sent, None
        if not ok or ask.turn + 1 >= self.turns:
            self.turn, self.history = 0, None
            return
        maker = self.workload.maker
        n = completion_tokens or ask.output_tokens
        if maker.kind == "token_ids" and isinstance(sent, np.ndarray):
            self.history = np.concatenate([sent, maker.fresh_ids(n)])
        elif maker.kind == "chat" and isinstance(sent, list):
            self.history = sent + [{"role": "assistant", "content": maker.text(n)}]
        else:
            self.history = f"{sent} {maker.text(n)}"
        self.turn = ask.turn + 1
