"""Helpers for the processes integration tests start."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen | None, timeout_s: float = 10) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it if it is still there after ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)
