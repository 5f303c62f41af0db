"""The server's reasons for failed requests: read from an error body, kept bounded, named for Locust.

Pure: no I/O, no clock.

``FailureSamples``: for each failure kind, the first ``per_kind`` distinct (HTTP status, excerpt)
pairs, each with how many requests failed with exactly it; other failures of the kind are counted
in ``other``. An excerpt is one line, at most ``EXCERPT_CHARS`` characters, redacted by the caller
(the API key) before it gets here. Memory is bounded whatever the run length; merging two samples
(workers -> master) keeps the first distinct messages up to the bound and adds every count, so the
total per kind is exact.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

import orjson

from loadgen.errors import STREAM_ERROR

EXCERPT_CHARS = 200
PER_KIND = 5


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """One line of at most ``limit`` characters (whitespace runs collapsed, '…' when cut)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


_TAGS = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S | re.I)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.S | re.I)


def server_reason(body: bytes) -> str:
    """The server's own words from an error body, as one line (not yet cut to length).

    JSON: OpenAI ``{"error": {"message"}}`` or ``{"error": "..."}``, FastAPI/pydantic
    ``{"detail": "..."}`` or ``{"detail": [{"loc": [...], "msg": "..."}]}``, or a top-level
    ``message``. HTML: the page's title, else its text without tags. Anything else: the text.
    """
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            return " ".join(str(err["message"]).split())
        if isinstance(err, str) and err:
            return " ".join(err.split())
        detail = obj.get("detail")
        if isinstance(detail, str) and detail:
            return " ".join(detail.split())
        if isinstance(detail, list) and detail:
            parts = []
            for d in detail[:3]:
                if isinstance(d, dict):
                    loc = ".".join(str(x) for x in d.get("loc", []) if x != "body")
                    parts.append(f"{loc}: {d.get('msg', '')}".strip(": "))
            if parts:
                return "; ".join(parts)
        if isinstance(obj.get("message"), str):
            return " ".join(obj["message"].split())
    text = body.decode("utf-8", "replace")
    if "<" in text and ">" in text:
        title = _TITLE.search(text)
        text = title.group(1) if title else _TAGS.sub(" ", text)
        text = html.unescape(text)
    return " ".join(text.split())


@dataclass
class FailureSamples:
    per_kind: int = PER_KIND
    samples: dict[str, list[list]] = field(default_factory=dict)  # kind -> [[status, excerpt, n], ...]
    other: dict[str, int] = field(default_factory=dict)  # kind -> failures beyond the distinct ones kept

    def add(self, kind: str, status: int | None, message: str, n: int = 1) -> bool:
        """Count one failure; True when its (status, excerpt) is new (worth printing once)."""
        text = excerpt(message)
        kept = self.samples.setdefault(kind, [])
        for entry in kept:
            if entry[0] == status and entry[1] == text:
                entry[2] += n
                return False
        if len(kept) < self.per_kind:
            kept.append([status, text, n])
            return True
        self.other[kind] = self.other.get(kind, 0) + n
        return False

    def merge(self, other: FailureSamples) -> None:
        for kind, entries in other.samples.items():
            for status, text, n in entries:
                self.add(kind, status, text, n)
        for kind, n in other.other.items():
            self.other[kind] = self.other.get(kind, 0) + n

    def is_empty(self) -> bool:
        return not self.samples

    def to_message(self) -> dict:
        return {"s": {k: [list(e) for e in v] for k, v in self.samples.items()}, "o": dict(self.other)}

    @classmethod
    def from_message(cls, d: dict) -> FailureSamples:
        out = cls()
        for kind, entries in d.get("s", {}).items():
            for status, text, n in entries:
                out.add(str(kind), None if status is None else int(status), str(text), int(n))
        out.other = {str(k): int(v) for k, v in d.get("o", {}).items()}
        return out

    def to_summary(self) -> dict:
        """summary.json form: {kind: [{"status", "message", "requests"}, ...]} plus ``other``."""
        out: dict = {kind: [{"status": s, "message": t, "requests": n} for s, t, n in entries]
                     for kind, entries in sorted(self.samples.items())}
        if self.other:
            out["other_messages"] = dict(sorted(self.other.items()))
        return out


class LocustFailure(Exception):
    """A failed request as Locust's own statistics name it (``locust_name``): Locust keys its
    failures table by ``repr`` of the exception, so ``repr`` is that name."""

    def __repr__(self) -> str:
        return str(self.args[0])


def locust_name(kind: str, status: int | None) -> str:
    """``http_400``, ``http_503`` for failures answered with an HTTP status, else the kind (an error
    event's code does not rename it: its HTTP status was 200). Never the message: messages vary per
    request and Locust's table has no bound."""
    return f"http_{status}" if status is not None and kind != STREAM_ERROR else kind


def answer_words(kind: str, status: int | None) -> str:
    """How the server answered a failed request, for one line to the user: ``HTTP 401``, ``an error
    event (code 400)`` for a refusal inside a 200 stream (vLLM), else the kind."""
    if status is None:
        return kind
    return f"an error event (code {status})" if kind == STREAM_ERROR else f"HTTP {status}"
