"""Where the time goes: the client's and the server's clocks side by side, per stage. Pure.

Inputs: the client's figures of a stage (``client_figures``: its TTFT, E2E, per-token and per-chunk
ITL histograms) and the stage's ``server`` object (``loadgen.server.window_latency``: the server's
histograms over the same window). Output: the stage row's ``breakdown`` object, per metric
(``ttft``, ``e2e``, ``itl``):

- means, which add up exactly over the same requests:
    client TTFT = server queue + server prefill + server rest + network_client
    client E2E  = server queue + server prefill + server decode + server rest + network_client
    client ITL  = server ITL + network_client
  with server rest = the server's own TTFT (E2E) - the parts it times separately (the API
  server's share: tokenizing, detokenizing; with SGLang, which has no prefill histogram, prefill
  too) and network_client = client mean - server mean: the network, any proxy, and the client.
- ITL: the client figure that counts what the server's histogram counts (``client_itl`` in the
  row, ``CLIENT_ITL``): vLLM records one inter-token sample per engine step per request whatever
  the tokens the step emitted (``vllm/v1/metrics/stats.py``), so under speculative decoding its
  ITL is per step, i.e. per chunk: compared with the client's per-chunk gap (``itl_chunk_s``).
  SGLang divides a gap by the chunk's tokens, and llama.cpp's decode seconds are per token:
  compared with the client's per-token ITL (``itl_token_s``). Comparing vLLM's per-step figure
  with a per-token one made the network + client part negative under speculation (k tokens a
  step), which hid a proxy buffering the stream (``disagreement``).
- percentiles side by side: ``client_pXX_s``, ``server_pXX_s`` and network_client_pXX_s = their
  difference. A difference of percentiles is not a percentile of differences, and the server's
  is interpolated within a bucket (``window_latency``): trust it to ``server_pXX_bucket_s``, the
  width of that bucket (the means, which the diagnosis and the flag use, have no such error).

``diagnosis`` names the part that dominates a stage's growth over the previous stage (on means,
which add up); ``disagreement`` says when the client's TTFT exceeds the server's by more than the
network allowance and the client's own loop lag explain (the stage's ``clocks_disagree`` flag).

Populations: the two sides time different sets of requests. The client's figures are of the
stage's ok requests, those *sent* in its window. The server's are of what it observed over the
window, from every client: TTFT of the requests whose first token came in it; queue, prefill,
decode and E2E of the requests that *finished* in it (vLLM observes them at the finish); ITL of
the steps in it. A clock comparison means something only when the populations are about the same,
so the flag is set only when the server's TTFT count over the window (``server_count``) and the
client's (``client_count``) agree within max(COUNT_TOLERANCE_MIN, COUNT_TOLERANCE_SHARE x the
larger count); otherwise the disagreement says the populations differ, without the flag.
"""

from __future__ import annotations

from loadgen.stats.stage_load import stage_label

QUANTILE_KEYS = ("p50_s", "p90_s", "p99_s")
# part of the server's time -> the histogram part in the stage's ``server`` object, per metric
PARTS = {
    "ttft": ("queue", "prefill"),
    "e2e": ("queue", "prefill", "decode"),
    "itl": (),
}
PART_NAMES = {"queue": "server queue time", "prefill": "server prefill time", "decode": "server decode time",
              "server_rest": "the server's other time (API server, tokenizing)",
              "network_client": "network + client time"}
# StageStats attributes; "itl" is per token, "itl_chunk" per chunk
CLIENT_HISTOGRAMS = {"ttft": "ttft_s", "e2e": "e2e_s", "itl": "itl_token_s", "itl_chunk": "itl_chunk_s"}
# the client's ITL figure that counts what each server's ITL histogram counts (module docstring)
CLIENT_ITL = {"vllm": "itl_chunk"}  # any other flavor: "itl" (per token)
CLIENT_ITL_NAMES = {"itl": "per_token", "itl_chunk": "per_chunk"}
DOMINANT = 0.6  # a part "dominates" a growth when it explains at least this share of it
GROWTH_MIN_S = 0.001  # growths smaller than this are noise, not worth a diagnosis
GROWTH_MIN_SHARE = 0.1  # ... or than this share of the previous stage's mean
# The network and client time the flag tolerates on top of the client's loop lag: a LAN or
# same-region round trip plus TLS and parsing, generously (the client's TTFT carries one round trip)
NETWORK_ALLOWANCE_S = 0.05
NETWORK_ALLOWANCE_SHARE = 0.1  # ... or this share of the server's own TTFT, whichever is larger
# When the two TTFT counts agree (module docstring). At each edge of a steady window the requests
# sent in its last TTFT have their first token after it closes, and the server's first TTFT after
# it opens holds requests sent before: those edges shift the counts by about rate x TTFT each way,
# which is a few per cent of a window while TTFT is short against it. Beyond 10 % the windows hold
# different requests: TTFT (queueing) long against the window, a stage cut short, or other clients
# of the same server. The absolute floor keeps a short, slow stage (a handful of requests) comparable.
COUNT_TOLERANCE_SHARE = 0.1
COUNT_TOLERANCE_MIN = 2


def client_figures(stats) -> dict:
    """{metric: {"count", "mean_s", "p50_s", "p90_s", "p99_s"}} of a StageStats (None where no
    sample); ``count``: samples (requests for TTFT and E2E, gaps for ITL)."""
    out = {}
    for metric, attr in CLIENT_HISTOGRAMS.items():
        h = getattr(stats, attr)
        out[metric] = ({"count": h.count, "mean_s": h.mean, **{k: h.quantile(int(k[1:3]) / 100) for k in QUANTILE_KEYS}}
                       if h.count else None)
    return out


def populations_agree(server_count: int | None, client_count: int | None) -> bool | None:
    """|server - client| <= max(COUNT_TOLERANCE_MIN, COUNT_TOLERANCE_SHARE x the larger); None
    when a count is unknown (a summary written before counts were kept)."""
    if server_count is None or client_count is None:
        return None
    return abs(server_count - client_count) <= max(COUNT_TOLERANCE_MIN,
                                                   COUNT_TOLERANCE_SHARE * max(server_count, client_count))


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def breakdown(client: dict, server: dict | None) -> dict | None:
    """The stage's ``breakdown`` object (module docstring); None when the server has no latency
    histograms for any of the metrics (or no client figure to compare)."""
    if not server:
        return None
    out = {}
    itl_key = CLIENT_ITL.get(server.get("flavor") or "", "itl")
    for metric, parts in PARTS.items():
        c, s = client.get(itl_key if metric == "itl" else metric), server.get(metric)
        if metric == "itl" and s is None:  # llama.cpp: decode seconds per token, a mean only
            s = server.get("decode_per_token")
        if not c or not s or s.get("mean_s") is None or c.get("mean_s") is None:
            continue
        row = {"client_mean_s": c["mean_s"], "server_mean_s": s["mean_s"], "server_count": s["count"],
               "client_count": c.get("count")}
        if metric == "itl":
            row["client_itl"] = CLIENT_ITL_NAMES[itl_key]  # which client figure was compared
        rest = s["mean_s"]
        for part in parts:
            mean = (server.get(part) or {}).get("mean_s")
            row[f"{part}_mean_s"] = mean
            rest -= mean or 0.0
        if parts:
            row["server_rest_mean_s"] = rest
        row["network_client_mean_s"] = c["mean_s"] - s["mean_s"]
        for k in QUANTILE_KEYS:
            row[f"client_{k}"], row[f"server_{k}"] = c.get(k), s.get(k)  # no server pXX: llama.cpp
            row[f"network_client_{k}"] = _diff(c.get(k), s.get(k))
            row[f"server_{k[:-2]}_bucket_s"] = s.get(f"{k[:-2]}_bucket_s")  # its error bound
        out[metric] = row
    return out or None


def stack(metric_row: dict) -> list[tuple[str, float]]:
    """The parts of one metric's mean, in stacking order, as (part, seconds): what the bar shows."""
    parts = [p for p in ("queue", "prefill", "decode", "server_rest") if metric_row.get(f"{p}_mean_s") is not None]
    if not parts:
        parts = ["server"]
    return [(p, metric_row[f"{p}_mean_s"]) for p in parts] + [("network_client", metric_row["network_client_mean_s"])]


def growth_parts(prev: dict, cur: dict) -> tuple[float, list[tuple[str, float]]]:
    """(growth of the client's mean, [(part, its growth)]) between two stages' metric rows."""
    before, after = dict(stack(prev)), dict(stack(cur))
    return cur["client_mean_s"] - prev["client_mean_s"], [(p, v - before.get(p, 0.0)) for p, v in after.items()]


def diagnosis(prev_row: dict | None, row: dict) -> str | None:
    """``C=256: TTFT mean +1.8 s (p50 +1.7 s), 92 % of it server queue time``: for each metric whose
    client mean grew noticeably since the previous stage, the part that explains at least
    DOMINANT of that growth; None when no part dominates a growth (or nothing grew)."""
    if not prev_row or not row.get("breakdown") or not prev_row.get("breakdown"):
        return None
    clauses = []
    for metric, name in (("ttft", "TTFT"), ("e2e", "E2E"), ("itl", "ITL")):
        prev, cur = prev_row["breakdown"].get(metric), row["breakdown"].get(metric)
        if not prev or not cur:
            continue
        if cur.get("client_itl") == "per_chunk":  # vLLM (CLIENT_ITL): say which ITL was compared
            name = "ITL per chunk"
        grew, parts = growth_parts(prev, cur)
        if grew < max(GROWTH_MIN_S, GROWTH_MIN_SHARE * prev["client_mean_s"]):
            continue
        part, value = max(parts, key=lambda pv: pv[1])
        if value / grew < DOMINANT:
            continue
        p50 = _diff(cur.get("client_p50_s"), prev.get("client_p50_s"))
        p50_text = f" (p50 {_signed(p50)})" if p50 is not None else ""
        clauses.append(f"{name} mean {_signed(grew)}{p50_text}, {min(value / grew, 1.0):.0%} of it "
                       f"{PART_NAMES.get(part, part)}")
    return f"{stage_label(row)}: " + "; ".join(clauses) if clauses else None


def disagreement(row: dict) -> dict | None:
    """What was compared and the likely cause, when the client's TTFT mean exceeds the server's by
    more than max(NETWORK_ALLOWANCE_S, NETWORK_ALLOWANCE_SHARE x server TTFT mean) + the client's
    event-loop lag p99; None when they agree (or cannot be compared). ``populations``: "agree"
    when the TTFT counts do (``populations_agree``; only then is the stage flagged
    ``clocks_disagree``), else "differ" (the cause says so) or "unknown"."""
    ttft = (row.get("breakdown") or {}).get("ttft")
    if not ttft:
        return None
    client = row.get("client") or {}
    lag = client.get("loop_lag_p99_s") or 0.0
    allowed = max(NETWORK_ALLOWANCE_S, NETWORK_ALLOWANCE_SHARE * ttft["server_mean_s"]) + lag
    gap = ttft["network_client_mean_s"]
    if gap <= allowed:
        return None
    itl = (row.get("breakdown") or {}).get("itl") or {}
    itl_gap = itl.get("network_client_mean_s")
    if "client_bound" in (row.get("flags") or []):
        cause = "client_bound: the load generator was short of CPU (see the stage's client object)"
    elif itl_gap is not None and itl.get("server_mean_s") and itl_gap > NETWORK_ALLOWANCE_SHARE * itl["server_mean_s"]:
        # the ITL pair counts alike on every server (CLIENT_ITL), so this holds under speculative decoding too
        cause = ("a proxy or the client buffering the stream: every token arrives later than the server "
                 "sent it, not only the first")
    else:
        cause = "the network or a proxy in front of the server: a delay per request, not per token"
    agree = populations_agree(ttft.get("server_count"), ttft.get("client_count"))
    if agree is False:
        cause = (f"none that the clocks can tell: the windows hold different requests (the server timed "
                 f"{ttft['server_count']} first tokens over the window, the client {ttft['client_count']} of "
                 f"the requests it sent in it): waits long against the window, or other clients of the server")
    return {"compared": "client TTFT mean - server TTFT mean (its histogram over the stage's window)",
            "gap_s": gap, "allowed_s": allowed, "loop_lag_p99_s": lag, "likely_cause": cause,
            "server_count": ttft.get("server_count"), "client_count": ttft.get("client_count"),
            "populations": {True: "agree", False: "differ", None: "unknown"}[agree]}


def off_reason(row: dict) -> str | None:
    """Why a stage has no breakdown of its TTFT (one line for the run), or None when it has one."""
    if (row.get("breakdown") or {}).get("ttft"):
        return None
    server = row.get("server")
    if not server and row.get("replicas"):
        return "several replicas: each replica's own figures are in its row (replicas.NAME.server), not summed here"
    if not server:
        return ("no server watch (the server is not known as vLLM, SGLang or llama.cpp, or guard.watch is "
                "off), so no server latency histograms were read")
    if server.get("disabled"):
        return f"the server watch is off ({server['disabled']}): a server without vLLM/SGLang/llama.cpp metrics"
    if server.get("prompt_per_token"):
        return "llama.cpp's counters give means per token only, not TTFT or E2E"
    if server.get("flavor") is None:
        return "the server's /metrics name no vLLM, SGLang or llama.cpp figures"
    return f"the server's /metrics ({server['flavor']}) has no latency histograms over the window"


def _signed(seconds: float) -> str:
    return f"{'+' if seconds >= 0 else '-'}{_dur(abs(seconds))}"


def _dur(seconds: float) -> str:
    return f"{seconds:.2g} s" if seconds >= 1 else f"{seconds * 1000:.3g} ms"


def clock_lines(rows: list[dict]) -> list[str]:
    """The console lines for the newest of ``rows`` (summary.json stage rows so far): its diagnosis
    (also kept as ``breakdown.diagnosis``), or, under the run's first row only, why the breakdown is
    off; the disagreement, when its stage is flagged."""
    row = rows[-1]
    k, out = row["index"], []
    if len(rows) == 1 and (why := off_reason(row)) is not None:
        out.append(f"llm-loadgen: client/server time breakdown off: {why}")
    if (line := diagnosis(rows[-2] if len(rows) > 1 else None, row)) is not None:
        row["breakdown"]["diagnosis"] = line
        out.append(f"llm-loadgen: stage {k} {line}")
    if (gap := (row.get("breakdown") or {}).get("disagreement")) is not None:
        if gap.get("populations") != "differ":
            out.append(f"llm-loadgen: stage {k} {stage_label(row)}: the client's TTFT is {_dur(gap['gap_s'])} over "
                       f"the server's (more than the {_dur(gap['allowed_s'])} network and loop lag explain); "
                       f"likely {gap['likely_cause']}")
        else:
            out.append(f"llm-loadgen: stage {k} {stage_label(row)}: the client's TTFT is {_dur(gap['gap_s'])} over "
                       f"the server's, but not flagged: the populations differ (server {gap.get('server_count')} "
                       f"first tokens over the window, client {gap.get('client_count')} requests sent in it)")
    return out


# compare's columns (compare_rows, compare.html), in ms: (key, title, (metric, field of breakdown[metric]))
COMPARE_COLUMNS = (
    ("server_ttft_mean_s", "Server TTFT mean (ms)", ("ttft", "server_mean_s")),
    ("server_queue_mean_s", "Server queue mean (ms)", ("ttft", "queue_mean_s")),
    ("network_client_ttft_mean_s", "Network+client TTFT mean (ms)", ("ttft", "network_client_mean_s")),
    ("server_e2e_mean_s", "Server E2E mean (ms)", ("e2e", "server_mean_s")),
    ("network_client_itl_mean_s", "Network+client ITL mean (ms)", ("itl", "network_client_mean_s")),
)


def compare_columns(summaries: list[dict]) -> tuple:
    """COMPARE_COLUMNS when a stage of any of the runs has a breakdown, else none (compare as before)."""
    have = any(s.get("breakdown") for summary in summaries for s in summary.get("stages") or [])
    return COMPARE_COLUMNS if have else ()


def column_value(stage: dict | None, path: tuple[str, str]) -> float | None:
    metric, field = path
    return (((stage or {}).get("breakdown") or {}).get(metric) or {}).get(field)
