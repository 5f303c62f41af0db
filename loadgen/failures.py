"""The server's reasons for failed requests, kept bounded; and the rule that stops a run whose first
requests are all refused.

Pure: no I/O, no clock.

``FailureSamples``: for each failure kind, the first ``per_kind`` distinct (HTTP status, excerpt)
pairs, each with how many requests failed with exactly it; other failures of the kind are counted
in ``other``. An excerpt is one line, at most ``EXCERPT_CHARS`` characters, redacted by the caller
(the API key) before it gets here. Memory is bounded whatever the run length; merging two samples
(workers -> master) keeps the first distinct messages up to the bound and adds every count, so the
total per kind is exact.

``FailFast``: the first requests of a run (nothing succeeded yet) that all fail with the same client
error (the same failure kind and HTTP status: 4xx other than 408 and 429, or a non-OpenAI
answer) stop the run after
``threshold`` of them: a refusing server then sees a handful of requests, not thousands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXCERPT_CHARS = 200
PER_KIND = 3
NOT_CLIENT_ERRORS = frozenset({408, 429})  # a timeout and a rate limit: overload, not a refusal


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """One line of at most ``limit`` characters (whitespace runs collapsed, '…' when cut)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


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

    def to_wire(self) -> dict:
        return {"s": {k: [list(e) for e in v] for k, v in self.samples.items()}, "o": dict(self.other)}

    @classmethod
    def from_wire(cls, d: dict) -> FailureSamples:
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


def is_client_refusal(kind: str, status: int | None) -> bool:
    """A failure that repeating will not fix: 4xx other than 408/429, or a non-OpenAI answer."""
    if kind == "not_openai":
        return True
    return status is not None and 400 <= status < 500 and status not in NOT_CLIENT_ERRORS


@dataclass
class FailFast:
    """Stop a run whose first ``threshold`` requests all failed with one and the same refusal."""

    threshold: int = 8
    seen: int = 0
    first: tuple | None = None  # (kind, status) of the first failure
    message: str = ""  # the first failure's excerpt, to quote
    decided: bool = False  # a success, or a different failure: the rule is off for this run
    tripped: bool = False

    def observe(self, ok: bool, kind: str | None = None, status: int | None = None, message: str = "") -> bool:
        """Feed one finished request; True exactly once, when the run must stop."""
        if self.decided or self.tripped:
            return False
        if ok or not is_client_refusal(kind or "", status):
            self.decided = True
            return False
        key = (kind, status)  # messages may differ per request (lengths in them): the status decides
        if self.first is None:
            self.first, self.message = key, excerpt(message)
        elif key != self.first:
            self.decided = True
            return False
        self.seen += 1
        if self.seen >= self.threshold:
            self.tripped = True
            return True
        return False
