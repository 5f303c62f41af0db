"""Datasets of the user's own traffic: one request per JSONL line (or CSV row), validated up front.

Pure apart from reading the file once. Each line is an object with:

- the prompt, exactly one of: ``input_tokens`` (a length: we synthesize a token-ID or calibrated
  text prompt of that many tokens), ``prompt`` (text, or a list of token IDs for completions),
  ``messages`` (OpenAI chat messages; chat endpoint only);
- optional ``output_tokens`` (forced like the scenario's output length; absent: the scenario's);
- optional ``timestamp`` (ms since the trace's start; all lines or none): replayed on that schedule;
- optional ``hash_ids`` (Mooncake traces: one id per block of ``block_tokens`` prompt tokens; equal
  leading ids mean a shared prefix) with ``input_tokens``.

Mooncake's own names are read too: ``input_length`` = input_tokens, ``output_length`` =
output_tokens. CSV files have a header row; only the length, timestamp and text ``prompt`` columns
make sense there. Errors name the file and the line; the first few are reported together.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.errors import ConfigError

MAX_REPORTED = 5
ALIASES = {"input_length": "input_tokens", "output_length": "output_tokens"}
KNOWN = {"input_tokens", "output_tokens", "prompt", "messages", "timestamp", "hash_ids"}


@dataclass(frozen=True)
class DatasetRequest:
    line: int  # 1-based line (JSONL) or row (CSV, header = row 1) in the file
    input_tokens: int | None  # None: the prompt is given (text/IDs/messages); usage tells its length
    output_tokens: int | None
    prompt: str | tuple[int, ...] | None = None
    messages: tuple | None = None
    timestamp_ms: float | None = None
    hash_ids: tuple[int, ...] = ()


class DatasetError(ConfigError):
    """Bad lines of a dataset: ``problems`` holds the first few, one ``FILE:LINE: what`` each."""

    def __init__(self, path: str, problems: list[str], total: int):
        self.problems, self.total = problems, total
        super().__init__("--dataset", path, f"{total} bad line(s), first: {problems[0]}",
                         "fix the lines listed, or drop them")


def _pos_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def parse_record(obj: object, line: int, endpoint: str) -> DatasetRequest | str:
    """One line's request, or the reason it is bad."""
    if not isinstance(obj, dict):
        return "must be a JSON object"
    obj = {ALIASES.get(k, k): v for k, v in obj.items()}
    unknown = sorted(set(obj) - KNOWN)
    if unknown:
        return f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(KNOWN))})"
    given = [k for k in ("input_tokens", "prompt", "messages") if obj.get(k) is not None]
    if len(given) != 1:
        return "needs exactly one of input_tokens, prompt, messages" + (f" (has {', '.join(given)})" if given else "")
    out = obj.get("output_tokens")
    if out is not None and not _pos_int(out):
        return f"output_tokens must be an integer >= 1, got {out!r}"
    inp, prompt, messages = obj.get("input_tokens"), obj.get("prompt"), obj.get("messages")
    if inp is not None and not _pos_int(inp):
        return f"input_tokens must be an integer >= 1, got {inp!r}"
    if prompt is not None:
        if isinstance(prompt, list):
            if endpoint != "completions":
                return "a token-ID prompt needs --endpoint completions (chat takes text or messages)"
            if not prompt or not all(_pos_int(t) or t == 0 for t in prompt):
                return "prompt as a list must hold token IDs (integers >= 0)"
            prompt = tuple(prompt)
        elif not isinstance(prompt, str) or not prompt.strip():
            return "prompt must be non-empty text or a list of token IDs"
    if messages is not None:
        if endpoint != "chat":
            return "messages need --endpoint chat"
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages):
            return "messages must be a non-empty list of {role, content} objects"
        messages = tuple(messages)
    ts = obj.get("timestamp")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0):
        return f"timestamp must be milliseconds >= 0, got {ts!r}"
    hash_ids = obj.get("hash_ids") or ()
    if hash_ids:
        if inp is None:
            return "hash_ids need input_tokens (input_length): the prompt is synthesized from them"
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            return "hash_ids must be a list of integers"
    return DatasetRequest(line, inp, out, prompt, messages, None if ts is None else float(ts), tuple(hash_ids))


def _rows(path: Path, text: str) -> list[tuple[int, object]]:
    if path.suffix.lower() == ".csv":
        rows = []
        for n, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
            rows.append((n, {k: _csv_value(k, v) for k, v in row.items() if v not in (None, "")}))
        return rows
    out = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            try:
                out.append((n, json.loads(raw)))
            except json.JSONDecodeError as exc:
                out.append((n, f"not valid JSON ({exc.msg} at column {exc.colno})"))
    return out


def _csv_value(key: str, value: str) -> object:
    if key in ("prompt",):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and key != "timestamp" else number


def load_dataset(path: str, endpoint: str) -> list[DatasetRequest]:
    """Every request of the file, in file order; DatasetError listing the first bad lines."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--dataset", path, f"cannot be read ({exc.__class__.__name__}: {exc})",
                          "give a JSONL or CSV file of requests") from None
    problems, requests = [], []
    for n, obj in _rows(p, text):
        got = obj if isinstance(obj, str) else parse_record(obj, n, endpoint)
        if isinstance(got, str):
            problems.append(f"{path}:{n}: {got}")
        else:
            requests.append(got)
    if not problems and not requests:
        problems.append(f"{path}: no requests in the file")
    stamped = sum(r.timestamp_ms is not None for r in requests)
    if not problems and 0 < stamped < len(requests):
        first = next(r.line for r in requests if r.timestamp_ms is None)
        problems.append(f"{path}:{first}: timestamp missing (give every line a timestamp, or none)")
    if problems:
        raise DatasetError(path, problems[:MAX_REPORTED], len(problems))
    return requests


def share(requests: list[DatasetRequest], part: int, parts: int, shuffle: bool, seed: int) -> list[DatasetRequest]:
    """Process ``part``'s disjoint share (every ``parts``-th request after an optional seeded
    shuffle, the same permutation on every process), so the shares add up to the whole file."""
    order = list(range(len(requests)))
    if shuffle:
        order = np.random.default_rng(seed).permutation(len(requests)).tolist()
    return [requests[i] for i in order[part::parts]]


def too_long(requests: list[DatasetRequest], default_output: int, max_model_len: int) -> tuple[int, DatasetRequest | None]:
    """Requests whose known input + output exceed the server's context, and the worst of them."""
    worst, count = None, 0
    for r in requests:
        total = _known_length(r) + (r.output_tokens or default_output)
        if total > max_model_len:
            count += 1
            if worst is None or total > _known_length(worst) + (worst.output_tokens or default_output):
                worst = r
    return count, worst


def _known_length(r: DatasetRequest) -> int:
    if r.input_tokens is not None:
        return r.input_tokens
    if isinstance(r.prompt, tuple):
        return len(r.prompt)
    return 0  # text: only the server knows; its 400 names it
