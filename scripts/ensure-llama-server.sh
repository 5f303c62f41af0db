#!/usr/bin/env bash
# ensure-llama-server.sh [--find]
#
# llama.cpp's `llama-server` for the real-engine conformance tests (tests/integration/test_llamacpp.py), built
# offline from the llama.cpp source that the llama-cpp-python sdist vendors. Nothing prebuilt is
# downloaded: pip fetches the pinned sdist, cmake builds only the llama-server target with the web
# UI, curl and OpenSSL off and llama.cpp's own libraries linked in (BUILD_SHARED_LIBS=OFF; the
# binary needs only libc, libstdc++ and libgomp).
#
# The build takes ~10 minutes on 2 cores, so the binary is cached OUTSIDE the clone, keyed by
# version: /var/cache/llm-loadgen/llama-server-$VERSION/llama-server, or
# ${XDG_CACHE_HOME:-~/.cache}/llm-loadgen/... when /var/cache is not writable.
#
# Prints the binary's path as the last line on stdout (progress goes to stderr). Idempotent: with
# the binary present it returns at once. Concurrent callers wait for one build (flock).
#   --find   only look: print the path and exit 0 when the binary is there, else exit 1.
# Exit status: 0 = built or present, or cannot build here (a tool missing and we are not root, no
# pip, no writable cache; a message says so and the tests skip); 1 = the download or the build
# failed (the message names the log).
set -euo pipefail

VERSION=0.3.36  # llama-cpp-python sdist; FIELD_NOTES' llama.cpp facts were checked on this one
TAG=ensure-llama-server
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}

say() { echo "$TAG: $*" >&2; }

# shellcheck source=cache-root.sh
. "$HERE/cache-root.sh"

if found=$(find_cached "llama-server-$VERSION/llama-server"); then
    echo "$found"
    exit 0
fi
if [ "${1:-}" = "--find" ]; then
    say "llama-server $VERSION is not built (looked in ${CACHE_ROOTS[*]});" \
        "run scripts/ensure-llama-server.sh (or make system-tools)"
    exit 1
fi

# Build prerequisites: installed from Debian when missing and we are root.
for tool in cmake g++ make; do  # each Debian package is named like its binary
    sh "$HERE/ensure-debian-package.sh" "$tool" "$tool" "the llama.cpp conformance tests" >&2
    if ! command -v "$tool" >/dev/null 2>&1; then
        say "cannot build llama-server without $tool; the llama.cpp conformance tests will be skipped"
        exit 0
    fi
done
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    say "cannot fetch the llama-cpp-python sdist: '$PYTHON -m pip' does not run;" \
        "set PYTHON to a Python with pip; the llama.cpp conformance tests will be skipped"
    exit 0
fi

ROOT=$(writable_cache_root "the llama.cpp conformance tests") || exit 0
DEST=$ROOT/llama-server-$VERSION
WORK=$ROOT/.build-llama-server-$VERSION
LOG=$ROOT/llama-server-$VERSION.build.log

exec 9>"$ROOT/llama-server-$VERSION.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    say "another build of llama-server $VERSION is running: waiting for it ($ROOT/llama-server-$VERSION.lock)"
    flock 9
fi
if found=$(find_cached "llama-server-$VERSION/llama-server"); then  # another caller built it while we waited
    echo "$found"
    exit 0
fi

fail() {
    say "$1 (log: $LOG)"
    tail -n 20 "$LOG" >&2 || true
    rm -rf "$WORK"  # the next call starts over; the sources and build tree are several hundred MB
    exit 1
}

started_s=$(date +%s)
rm -rf "$WORK" && mkdir -p "$WORK"
: >"$LOG"
say "fetching the llama-cpp-python $VERSION sdist with pip"
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --dest "$WORK" \
    "llama-cpp-python==$VERSION" >>"$LOG" 2>&1 \
    || fail "pip could not fetch llama-cpp-python==$VERSION (is the package index reachable?)"
tar -xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK" >>"$LOG" 2>&1 \
    || fail "could not unpack $WORK/llama_cpp_python-$VERSION.tar.gz"
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
[ -f "$SRC/CMakeLists.txt" ] || fail "the sdist has no vendored llama.cpp at $SRC"

say "building llama-server (nice, -j2; ~10 minutes on 2 cores; log: $LOG)"
# LLAMA_USE_PREBUILT_UI=ON would download the web UI: everything that could fetch is off.
nice -n 10 cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    >>"$LOG" 2>&1 || fail "cmake configure failed"
nice -n 10 cmake --build "$WORK/build" --target llama-server -j2 >>"$LOG" 2>&1 \
    || fail "cmake build of llama-server failed"
built=$(find "$WORK/build" -type f -name llama-server -perm -u+x | head -n 1)
[ -n "$built" ] || fail "the build finished but produced no llama-server binary"
"$built" --version >>"$LOG" 2>&1 || fail "the built $built does not run ('--version' failed)"

mkdir -p "$DEST"
cp "$built" "$DEST/llama-server.tmp" && mv "$DEST/llama-server.tmp" "$DEST/llama-server"
rm -rf "$WORK" "$LOG"  # the log (~7 MB) is kept only when the build fails
say "built llama-server $VERSION in $(( $(date +%s) - started_s )) s" \
    "($(du -k "$DEST/llama-server" | cut -f1) KiB)"
echo "$DEST/llama-server"
