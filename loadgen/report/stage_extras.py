"""One console line under a stage row for what only some servers have: a reasoning model's answer,
several tokens per chunk, a prefix cache. Pure: a summary.json stage row in, text out.

The stage table keeps its columns (a plain model's run looks as before); the line appears only
when there is something to say: a request reasoned, chunks carried more than one token on average
(speculative decoding, a stream interval), or the server reported cached prompt tokens, or the server's own counters gave its speculative
accept length or prefix cache hit rate over the stage's window (``server`` object), or DCGM exporters
(``--gpu-metrics``) gave the GPUs' figures (``gpu`` object).
"""

from __future__ import annotations

from loadgen.stats.metrics import num

ONE_TOKEN_SLACK = 0.005  # tokens per chunk within this of 1 is one token a chunk


def extras_line(row: dict) -> str | None:
    """``llm-loadgen: stage 2: answer after 812 ms p50 (p99 905 ms; TTFT p50 200 ms), 20 reasoning
    tokens/request (usage), answer 50.0 tok/s p50; 2.29 tokens/chunk; 54% of prompt tokens cached``."""
    parts = []
    if row.get("ttfat_p50_s") is not None or row.get("reasoning_tokens_per_request") is not None:
        parts.append(
            f"answer after {_ms(row.get('ttfat_p50_s'))} ms p50 (p99 {_ms(row.get('ttfat_p99_s'))} ms; TTFT p50 "
            f"{_ms(row.get('ttft_p50_s'))} ms), {num(row.get('reasoning_tokens_per_request'))} reasoning "
            f"tokens/request ({row.get('reasoning_tokens_source') or '-'}), answer "
            f"{num(row.get('answer_decode_tps_p50'))} tok/s p50")
    tpc = row.get("tokens_per_chunk")
    if tpc is not None and abs(tpc - 1) > ONE_TOKEN_SLACK:
        parts.append(f"{tpc:.2f} tokens/chunk")
    if row.get("cached_share") is not None:
        parts.append(f"{row['cached_share'] * 100:.0f}% of prompt tokens cached")
    parts += _server_parts(row.get("server") or {})
    if row.get("gpu"):
        parts.append(_gpu_part(row))
    if not parts:
        return None
    return f"llm-loadgen: stage {row['index']}: " + "; ".join(parts)


def _server_parts(server: dict) -> list[str]:
    """The server's own figures over the window (``loadgen.server.window_spec``), when it has them:
    ``server: accept length 2.80 (60% of drafts accepted)``, ``server prefix cache hit 75%``; a
    gauge read at the window's close (SGLang) says so."""
    parts = []
    length, rate = server.get("spec_accept_length"), server.get("spec_acceptance_rate")
    if length is not None:
        accepted = f", {rate * 100:.0f}% of drafts accepted" if rate is not None else ""
        at_close = " (gauge at the window's close)" if server.get("spec_source") == "gauge_at_close" else ""
        parts.append(f"server accept length {length:.2f}{accepted}{at_close}")
    hit = server.get("prefix_cache_hit_rate")
    if hit is not None:
        at_close = " (gauge at the window's close)" if server.get("prefix_cache_source") == "gauge_at_close" else ""
        parts.append(f"server prefix cache hit {hit * 100:.0f}%{at_close}")
    return parts


def _gpu_part(row: dict) -> str:
    """``8 GPUs 5040 W (630 W each), util 97%, memory max 77163 MiB, 2.52 J/output tok``."""
    gpu = row["gpu"]
    util = gpu.get("util_pct_mean")
    return (f"{gpu.get('gpus')} GPUs {num(gpu.get('power_w_total'))} W ({num(gpu.get('power_w_mean_per_gpu'))} W "
            f"each), util {'-' if util is None else f'{util:.0f}'}%, memory max {num(gpu.get('fb_used_mib_max'))} "
            f"MiB, {num(row.get('joules_per_output_token'))} J/output tok")


def _ms(seconds: float | None) -> str:
    return num(None if seconds is None else seconds * 1000)
