#!/usr/bin/env bash
# ensure-llm-router.sh ROUTER [--find]     ROUTER: vllm or sglang
#
# A router built for LLMs, for the replicas test behind one (tests/integration/test_replicas_llm_router.py):
# vLLM's (the PyPI package `vllm-router`) or SGLang's (`sglang-router`), Rust load balancers with a
# Python launcher, each in a venv of its own cached OUTSIDE the clone and keyed by version
# (scripts/cache-root.sh): .../ROUTER-router-$VERSION/venv/bin/ROUTER-router. ~30 MB, seconds the first time.
#
# Prints the router's executable as the last line on stdout (progress goes to stderr).
# Idempotent; concurrent callers wait for one install (flock).
#   --find   only look: print the executable and exit 0 when installed, else exit 1.
# Exit status: 0 = installed or present, or cannot install here (the test then skips, saying why);
# 1 = the install failed (the message names the log); 2 = ROUTER is neither vllm nor sglang.
set -euo pipefail

case "${1:-}" in
    vllm) VERSION=0.1.17 ;;
    sglang) VERSION=0.3.2 ;;
    *) echo "usage: $0 vllm|sglang [--find]" >&2; exit 2 ;;
esac
PACKAGE=$1-router
ENSURE_COMMAND="scripts/ensure-llm-router.sh $1"  # the --find message names it
TAG=ensure-llm-router
PYTHON=${PYTHON:-python3}

say() { echo "$TAG: $*" >&2; }

# shellcheck source=cache-root.sh
. "$(cd "$(dirname "$0")" && pwd)/cache-root.sh"

begin_venv_install "$PACKAGE-$VERSION" "venv/bin/$PACKAGE" "the $PACKAGE replicas test" "${2:-}"

say "installing $PACKAGE $VERSION into $DEST/venv (log: $LOG)"
"$PYTHON" -m venv "$DEST/venv" >>"$LOG" 2>&1 || fail "could not create the venv"
"$DEST/venv/bin/python" -m pip install --quiet "$PACKAGE==$VERSION" >>"$LOG" 2>&1 \
    || fail "pip could not install $PACKAGE==$VERSION (is the package index reachable?)"
"$DEST/venv/bin/$PACKAGE" --help >>"$LOG" 2>&1 || fail "the installed $PACKAGE does not start"
touch "$DEST/.installed"
say "installed $PACKAGE $VERSION ($(du -sm "$DEST" | cut -f1) MB)"
rm -f "$LOG"
echo "$DEST/venv/bin/$PACKAGE"
