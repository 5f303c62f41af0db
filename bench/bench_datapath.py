"""CPU cost of the pure data path: SSE decode -> RequestRecord -> StageStats, per CPU-second.

Synthetic vLLM-shaped chat streams of 1000 tokens (role delta, 1000 one-token content chunks, a
finish chunk, an include_usage final chunk, [DONE]). Each event arrives as its own socket read
(the worst case for the decoder), and again with 8 events per read. Prints figures only:

    .venv/bin/python bench/bench_datapath.py [--streams N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled
from loadgen.stats.records import RequestRecord  # noqa: E402
from loadgen.stats.stage_stats import Collector  # noqa: E402
from loadgen.wire.sse import SSEDecoder  # noqa: E402

TOKENS = 1000
HEAD = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk", "created": 1767225600,
        "model": "meta-llama/Llama-3.1-8B-Instruct"}  # fmt: skip


def event(choices, **extra) -> bytes:
    return b"data: " + orjson.dumps({**HEAD, "choices": choices, **extra}) + b"\n\n"


def vllm_stream() -> list[bytes]:
    """One stream as a list of SSE events (bytes on the wire)."""
    out = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                   "finish_reason": None}])]  # fmt: skip
    for i in range(TOKENS):
        out.append(event([{"index": 0, "delta": {"content": f" w{i % 97}"}, "logprobs": None,
                           "finish_reason": None}]))  # fmt: skip
    out.append(event([{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "length"}]))
    out.append(
        event([], usage={"prompt_tokens": 512, "completion_tokens": TOKENS, "total_tokens": 512 + TOKENS})
    )
    out.append(b"data: [DONE]\n\n")
    return out


def run(reads: list[bytes], streams: int, *, record: bool, stats: bool) -> float:
    """CPU seconds for ``streams`` streams through the chosen stages."""
    collector = Collector()
    cpu0 = time.process_time()
    for s in range(streams):
        dec = SSEDecoder()
        rec = RequestRecord(0.0, TOKENS, "/v1/chat/completions")
        t = 0.2
        for data in reads:
            t += 0.02
            payloads = dec.feed(data)
            if record:
                for p in payloads:
                    rec.on_payload(p, t)
        if record:
            result = rec.finish(t, eof=True)
            if stats:
                collector.record_result(result, s % 4, 512, TOKENS)
                collector.add_window_tokens(s % 4, rec.chunk_tokens_seen)
    cpu = time.process_time() - cpu0
    if stats:
        assert collector.totals.requests_ok == streams, "bench streams must be ok"
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=200)
    args = ap.parse_args()
    events = vllm_stream()
    grouped = [b"".join(events[i : i + 8]) for i in range(0, len(events), 8)]
    n_events = len(events) * args.streams
    n_tokens = TOKENS * args.streams
    print(f"{args.streams} streams x {TOKENS} tokens, {len(events)} SSE events each "
          f"({sum(map(len, events)) // len(events)} bytes/event)")  # fmt: skip
    print(f"{'stages':<28}{'reads':>10}{'events/CPU-s':>16}{'tokens/CPU-s':>16}{'us/event':>10}")
    for label, record, stats in (
        ("decode", False, False),
        ("decode+record", True, False),
        ("decode+record+stats", True, True),
    ):
        for reads_label, reads in (("1 event", events), ("8 events", grouped)):
            run(reads, max(1, args.streams // 10), record=record, stats=stats)  # warm up
            cpu = run(reads, args.streams, record=record, stats=stats)
            print(f"{label:<28}{reads_label:>10}{n_events / cpu:>16,.0f}{n_tokens / cpu:>16,.0f}"
                  f"{cpu / n_events * 1e6:>10.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
