#!/usr/bin/env bash
# ensure-vllm-router.sh [--find]
#
# vLLM's router (the PyPI package `vllm-router`, a Rust load balancer with a Python launcher) for the
# replicas test behind a router built for LLMs (tests/integration/test_replicas_vllm_router.py), in
# a venv of its own cached OUTSIDE the clone and keyed by version (scripts/cache-root.sh):
# .../vllm-router-$VERSION/venv/bin/vllm-router. ~30 MB, a few seconds the first time.
#
# Prints the vllm-router executable as the last line on stdout (progress goes to stderr).
# Idempotent; concurrent callers wait for one install (flock).
#   --find   only look: print the executable and exit 0 when installed, else exit 1.
# Exit status: 0 = installed or present, or cannot install here (the test then skips, saying why);
# 1 = the install failed (the message names the log).
set -euo pipefail

VERSION=0.1.17
TAG=ensure-vllm-router
PYTHON=${PYTHON:-python3}

say() { echo "$TAG: $*" >&2; }

# shellcheck source=cache-root.sh
. "$(cd "$(dirname "$0")" && pwd)/cache-root.sh"

begin_venv_install "vllm-router-$VERSION" venv/bin/vllm-router "the vllm-router replicas test" "${1:-}"

say "installing vllm-router $VERSION into $DEST/venv (log: $LOG)"
"$PYTHON" -m venv "$DEST/venv" >>"$LOG" 2>&1 || fail "could not create the venv"
"$DEST/venv/bin/python" -m pip install --quiet "vllm-router==$VERSION" >>"$LOG" 2>&1 \
    || fail "pip could not install vllm-router==$VERSION (is the package index reachable?)"
"$DEST/venv/bin/vllm-router" --help >>"$LOG" 2>&1 || fail "the installed vllm-router does not start"
touch "$DEST/.installed"
say "installed vllm-router $VERSION ($(du -sm "$DEST" | cut -f1) MB)"
rm -f "$LOG"
echo "$DEST/venv/bin/vllm-router"
