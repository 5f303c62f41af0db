"""Does the workload share prompt prefixes, and did the server say how many it served from cache?

Pure. A multi-turn conversation resends its history, ``prompt.shared_prefix_tokens`` gives every
request a common head, and a trace's ``hash_ids`` name shared blocks: each such workload is run to
exercise the server's prefix cache. A stage row's ``cached_share`` (loadgen.stats.metrics) comes from
``usage.prompt_tokens_details.cached_tokens``, which servers send only when asked; without it a
stage gets a warning naming the server flag.
"""

from __future__ import annotations

# How each server is asked for usage.prompt_tokens_details.cached_tokens (llama.cpp always sends it).
HOW_TO_REPORT = "vLLM: --enable-prompt-tokens-details; SGLang: --enable-cache-report"


def prefix_sharing(turns: int, shared_prefix_tokens: int, trace_hash_ids: bool) -> str | None:
    """Why the workload shares prompt prefixes (words for a warning), or None when it does not."""
    if turns > 1:
        return f"{turns}-turn conversations resend their history"
    if trace_hash_ids:
        return "the trace's hash_ids share prompt blocks"
    if shared_prefix_tokens > 0:
        return f"every prompt starts with the same {shared_prefix_tokens} tokens"
    return None


def missing_cache_detail(row: dict, sharing: str | None) -> str | None:
    """The warning for a stage whose workload shares prefixes (``sharing``: prefix_sharing's words)
    while no ok request's usage carried cached_tokens; None otherwise, in particular when some did
    and others did not (SGLang omits the detail when nothing was cached: the flag is on)."""
    if (sharing is None or not row.get("requests") or row.get("cached_share") is not None
            or row.get("cached_prompt_tokens") is not None):
        return None
    return (f"llm-loadgen: warning: stage {row['index']}: {sharing}, but the server reported no cached "
            f"prompt tokens (usage.prompt_tokens_details), so the stage has no cached share; to turn the "
            f"report on: {HOW_TO_REPORT}")
