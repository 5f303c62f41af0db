"""``requests.jsonl``: one line per request of the run, streamed to the run folder as it goes.

The owning process (local runner or master) holds the file (``RequestFile``): a buffered writer
(64 KiB), flushed whenever the run's results are written (after every stage and on every stop
path) and closed when the process quits; memory stays that buffer whatever the run's length.

Distributed runs: each worker keeps the fields of its requests since its last report
(``RequestBuffer``) and ships them in the report (every 3 s, and its final report); the master
writes them into the one file of its run folder. Chosen over workers writing their own files
because workers often run on other hosts whose disks the master cannot read (the run folder is
the master's), and a merge at the end would depend on every worker's disk and clock; the cost is
one report's worth of lines per worker in memory (the requests of 3 s, ~300 bytes each: 1 MB at
1000 requests/s) and the same in bandwidth, which the report already uses for its histograms.
The line's schema: ``loadgen.stats.request_line``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from loadgen.stats.request_line import request_line

log = logging.getLogger("llm_loadgen")

FILE_NAME = "requests.jsonl"
BUFFER_BYTES = 1 << 16


class RequestFile:
    """The run folder's ``requests.jsonl`` (owning process): ``add`` one request's fields."""

    def __init__(self, run_dir: str | Path, run_name: str | None):
        self.path = Path(run_dir) / FILE_NAME
        self.run_name = run_name
        self.lines = 0
        self._file = None
        self._failed = False
        self.path.touch()  # an opted-in run with no request still shows the (empty) file

    def add(self, fields: dict) -> None:
        f = self._open()
        if f is None:
            return
        try:
            f.write(request_line(self.run_name, fields) + "\n")
            self.lines += 1
        except OSError as exc:
            self._fail(exc)

    def add_many(self, many: list[dict]) -> None:
        for fields in many:
            self.add(fields)

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as exc:
                self._fail(exc)

    def close(self) -> None:
        """Flush and close; a later ``add`` (a late report) reopens the file to append."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self):
        if self._file is None and not self._failed:
            try:
                self._file = open(self.path, "a", buffering=BUFFER_BYTES, encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                self._fail(exc)
        return self._file

    def _fail(self, exc: OSError) -> None:
        if not self._failed:
            log.warning("requests.jsonl: cannot write %s (%s); the per-request export stops here", self.path, exc)
        self._failed = True
        self._file = None


class RequestBuffer:
    """A worker's requests since its last report: ``add`` as requests end, ``take`` for the report."""

    def __init__(self):
        self._pending: list[dict] = []

    def add(self, fields: dict) -> None:
        self._pending.append(fields)

    def take(self) -> list[dict]:
        out, self._pending = self._pending, []
        return out
