"""Per-replica figures of a stage (docs/replicas.md): one row per replica, the load skew and flags.

Pure: StageStats and the replicas' ``server`` figures in, the stage row's ``replicas`` and
``replica_skew`` out.

A replica's row: the stage's figures of the requests it served, counted by the same ``StageStats``
code as the stage (``StageStats.model_row``: requests, errors, tokens, output tok/s, TTFT/ITL/E2E/TPOT
p50 and p99), so the rows' requests, errors and tokens add up to the stage's exactly; its
``kv_capacity_tokens`` (the start check's), and ``server``: its own ``/metrics`` over the window
(KV use mean and max, queue max, preemptions, the engine's output tok/s; ``loadgen.server.replica_watch``).

The skew and the flags (thresholds: the scenario's ``replicas.share_ratio_max`` R and
``replicas.slow_ratio`` S):

- share_i = requests_i / sum of requests; fair share = 1 / N (N replicas)
- load_ratio_i = share_i / fair share = requests_i / mean(requests)
- ``replica_skew`` = max_i requests_i / mean(requests) (1 = even; N = one replica took everything)
- flag ``over_share`` when load_ratio_i > R, ``under_share`` when load_ratio_i < 1 / R
- flag ``slow`` when its TTFT p50 or TPOT p50 > S x the median of the other replicas' (two replicas
  or more with the figure): slower to start (prefill, queue) or to decode. Medians, not p99s: a
  p99 of a few dozen requests moves with one late request on a busy client, a median only when the
  replica is slower; TPOT, not ITL: a router may pass several chunks on in one read (ITL 0 then),
  TPOT = (E2E - TTFT) / (output tokens - 1) is not moved by that.

A replica's ``flags`` are its own (``REPLICA_FLAGS``, not stage flags); a stage with a flagged
replica gets the stage flag ``replica_skew`` (a share flag) or ``replica_slow``
(``loadgen.stats.flags``).
"""

from __future__ import annotations

import statistics

from loadgen.stats.stage_stats import MODEL_FIELDS, StageStats

REPLICA_FLAGS = ("over_share", "under_share", "slow")  # a replica row's own flags (module docstring)
SLOW_FIGURES = ("ttft_p50_s", "tpot_p50_s")
# a replica's row: a model's figures (MODEL_FIELDS) and its TPOT, both medians of SLOW_FIGURES included
REPLICA_FIELDS = (*MODEL_FIELDS, "tpot_p50_s")


def replica_rows(names: tuple[str, ...], stats: dict[str, StageStats] | None, window_s: float | None,
                 capacities: dict[str, int | None] | None = None,
                 servers: dict[str, dict] | None = None) -> dict[str, dict]:
    """{name: row} for ``names`` in order (zeros for a replica that served nothing), then any other
    name ``stats`` holds (e.g. ``unattributed``: a router's answer named no known engine).
    ``stats`` None: the client does not know which replica served a request (a router that does
    not name it): the rows hold each engine's own figures (``engine_figures``)."""
    counted, capacities, servers = stats is not None, capacities or {}, servers or {}
    stats = stats or {}
    rows = {}
    for name in (*names, *(n for n in stats if n not in names)):
        row = (stats.get(name) or StageStats()).model_row(window_s, REPLICA_FIELDS) if counted else \
            engine_figures(servers.get(name))
        if name in capacities:
            row["kv_capacity_tokens"] = capacities[name]
        if name in servers:
            row["server"] = servers[name]
        rows[name] = row
    return rows


def engine_figures(server: dict | None) -> dict:
    """A replica's figures from its own metrics over the window, when the client cannot tell which
    replica served a request (a router that does not name it): ``source: engine``; requests = its
    E2E histogram's count (requests it finished in the window), output tokens and tok/s its
    generation counter's, TTFT p50/p99 its TTFT histogram's, ITL p50/p99 its ITL histogram's and
    ``tpot_p50_s`` = its ITL p50 (vLLM takes one ITL sample per engine step and request: per token
    with one token a step, a TPOT). Not the client's clock, and not summing to the stage: the
    engines' windows are read at the window's edges, the stage counts the client's requests."""
    server = server or {}
    part = {key: server.get(key) or {} for key in ("ttft", "itl", "e2e")}
    if not part["e2e"].get("count") and server.get("output_tokens") is None:
        return {"source": "engine"}
    return {"source": "engine", "requests": int(part["e2e"].get("count") or 0),
            "output_tokens": server.get("output_tokens"), "output_tokens_per_s": server.get("output_tokens_per_s"),
            "ttft_p50_s": part["ttft"].get("p50_s"), "ttft_p99_s": part["ttft"].get("p99_s"),
            "itl_p50_s": part["itl"].get("p50_s"), "itl_p99_s": part["itl"].get("p99_s"),
            "tpot_p50_s": part["itl"].get("p50_s")}


def judge(all_rows: dict[str, dict], names: tuple[str, ...], share_ratio_max: float,
          slow_ratio: float) -> tuple[float | None, list[str]]:
    """Add ``load_ratio`` and ``flags`` to the rows of the replicas ``names`` (module docstring;
    another row, e.g. unattributed requests, is not a replica and is not judged); return
    (replica_skew, the stage's flags). No request at all gives no skew (None)."""
    rows = {name: all_rows[name] for name in names if "requests" in all_rows.get(name, {})}
    counts = [row["requests"] for row in rows.values()]
    mean = sum(counts) / len(counts) if counts else 0
    stage_flags: list[str] = []
    for name, row in rows.items():
        marks = []
        row["load_ratio"] = row["requests"] / mean if mean else None
        if row["load_ratio"] is not None and row["load_ratio"] > share_ratio_max:
            marks.append("over_share")
        elif row["load_ratio"] is not None and row["load_ratio"] < 1 / share_ratio_max:
            marks.append("under_share")
        for key in SLOW_FIGURES:
            others = [r[key] for n, r in rows.items() if n != name and r.get(key)]
            if row.get(key) and others and row[key] > slow_ratio * statistics.median(others):
                marks.append("slow")
                break
        row["flags"] = marks
        if "slow" in marks and "replica_slow" not in stage_flags:
            stage_flags.append("replica_slow")
        if {"over_share", "under_share"} & set(marks) and "replica_skew" not in stage_flags:
            stage_flags.append("replica_skew")
    return (max(counts) / mean if mean else None), stage_flags
