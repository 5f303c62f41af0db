"""Stop a run whose first requests are all refused: a refusing server sees a handful, not thousands.

Pure: no I/O, no clock. The first requests of a run (nothing succeeded yet) that all fail with the
same client error (the same failure kind and HTTP status: 4xx other than 408 and 429, or a
non-OpenAI answer, ``loadgen.errors.is_client_refusal``) stop the run after ``threshold`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.errors import is_client_refusal
from loadgen.stats.failures import excerpt


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
