"""Automatic prefix caching, as vLLM and SGLang do it: a prompt's leading blocks already computed
for an earlier request cost no prefill.

Pure: no I/O, no clock. A prompt of token IDs is cut into full blocks of ``block_tokens``; block i
is named by a chained hash of blocks 0..i, so two prompts share cached block i only if they share
the whole prefix up to it. The cache is an LRU of block hashes holding at most ``capacity_blocks``
blocks; a request's blocks are inserted when its prefill completes.

hit tokens of a request = block_tokens x (leading blocks found in the cache), at most prompt - 1
(the last prompt token is always computed: it samples the first output token).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(token_ids: Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of ``token_ids`` (a partial last block is not cached)."""
    out, h = [], 0
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        h = hash((h, tuple(token_ids[start:start + block_tokens])))
        out.append(h)
    return tuple(out)


class PrefixCache:
    def __init__(self, block_tokens: int, capacity_blocks: int):
        if block_tokens < 1 or capacity_blocks < 1:
            raise ValueError("block_tokens and capacity_blocks must be >= 1")
        self.block_tokens, self.capacity_blocks = block_tokens, capacity_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.queried_tokens = 0  # prompt tokens looked up (vLLM prefix_cache_queries)
        self.hit_tokens = 0  # of which found cached (vLLM prefix_cache_hits)

    def lookup(self, hashes: Sequence[int], prompt_tokens: int) -> int:
        """Cached tokens of a prompt's leading blocks (marks them recently used); counted."""
        n = 0
        for h in hashes:
            if h not in self._lru:
                break
            self._lru.move_to_end(h)
            n += 1
        hit = min(n * self.block_tokens, max(prompt_tokens - 1, 0))
        self.queried_tokens += prompt_tokens
        self.hit_tokens += hit
        return hit

    def insert(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            self._lru[h] = None
            self._lru.move_to_end(h)
        while len(self._lru) > self.capacity_blocks:
            self._lru.popitem(last=False)

    def __len__(self) -> int:
        return len(self._lru)
