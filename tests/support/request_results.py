"""RequestResult builders for the statistics tests: a streamed request that succeeded, with seeded
gaps and chunk sizes, and one that failed."""

from __future__ import annotations

import numpy as np

from loadgen.stats.records import RequestResult


def ok_result(rng, *, prompt=100, completion=None, estimated=False, chunks=None):
    chunks = chunks or int(rng.integers(2, 40))
    gaps = rng.lognormal(-4, 0.5, chunks - 1)
    w = rng.integers(1, 4, chunks - 1)
    n = completion if completion is not None else int(w.sum()) + 1
    ttft = float(rng.lognormal(-1, 0.5))
    e2e = ttft + float(gaps.sum())
    return RequestResult(
        True, None, "", None if estimated else prompt, n, estimated, ttft, e2e, (e2e - ttft) / (n - 1),
        (n - 1) / (e2e - ttft), gaps / w, w, gaps, "length", chunks,
    )  # fmt: skip


def failed_result(kind, tokens=3):
    e = np.empty(0)
    return RequestResult(
        False, kind, "x", None, tokens, True, 0.1, 0.5, None, None, e, e.astype(int), e, None, 3
    )
