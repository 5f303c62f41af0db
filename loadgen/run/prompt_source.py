"""The asks one sender makes: the workload assembled for this process and this server.

Token IDs (completions), calibrated text (completions on a server that refuses token IDs), or
calibrated chat messages (``loadgen.server.text_calibration``); lengths from the scenario's
distributions, or this process's share of the dataset (``Runtime.dataset_cursor``). Used by the
closed-loop users, the open-loop dispatcher and the KV guard's duration sample.
"""

from __future__ import annotations

from loadgen.server.text_calibration import text_fit
from loadgen.wire.client import StreamClient
from loadgen.workload.asks import PromptMaker, Workload
from loadgen.workload.conversation import Conversation


def prompt_source(rt, client: StreamClient, model: str, seed_key: tuple) -> Workload | Conversation:
    """The requests one sender makes (loadgen.workload.asks); ``seed_key`` makes its prompts its own."""
    sc, compat = rt.scenario, rt.compat
    id_range = compat.token_id_range or tuple(sc.prompt.token_id_range)
    if sc.endpoint == "completions" and compat.prompt_kind == "token_ids":
        maker = PromptMaker("token_ids", id_range, seed_key, sc.prompt.shared_prefix_tokens, sc.prompt.seed)
    else:
        maker = PromptMaker("chat" if sc.endpoint == "chat" else "text", id_range, seed_key,
                            fit=text_fit(client, sc, model))
    workload = Workload(maker, sc.length_dist("input"), sc.length_dist("output"), seed_key, rt.dataset_cursor(),
                        hash_salt=sc.prompt.seed)
    return Conversation(workload, sc.workload.turns) if sc.workload.turns > 1 else workload
