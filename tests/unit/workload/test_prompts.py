"""Trace prompts: Mooncake hash_ids become shared token-ID prefixes of exact length."""

from __future__ import annotations

import numpy as np

from loadgen.workload.prompts import hashed_prefix_prompt


def test_equal_leading_ids_share_exactly_those_blocks():
    rng = np.random.default_rng(0)
    a = hashed_prefix_prompt(1500, (7, 8, 9), 512, (1000, 30000), rng).tolist()
    b = hashed_prefix_prompt(1200, (7, 8, 4), 512, (1000, 30000), rng).tolist()
    assert len(a) == 1500 and len(b) == 1200
    assert a[:1024] == b[:1024] and a[1024:1200] != b[1024:1200]
    assert all(1000 <= t < 30000 for t in a + b)


def test_tokens_beyond_the_blocks_are_fresh_and_salt_changes_everything():
    rng = np.random.default_rng(1)
    a = hashed_prefix_prompt(700, (5,), 512, (0, 50000), rng).tolist()
    b = hashed_prefix_prompt(700, (5,), 512, (0, 50000), rng).tolist()
    assert a[:512] == b[:512] and a[512:] != b[512:]
    c = hashed_prefix_prompt(700, (5,), 512, (0, 50000), rng, salt=1).tolist()
    assert c[:512] != a[:512]
    assert len(hashed_prefix_prompt(10, (), 512, (0, 9), rng)) == 10
