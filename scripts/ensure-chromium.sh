#!/usr/bin/env bash
# Make sure a headless Chromium is available for the report rendering test.
#
# Idempotent and quiet: does nothing when `chromium` is already on PATH. Otherwise, as root on a
# Debian-like machine, installs the distribution package (`apt-get update` at most once). When it
# cannot install (not root, no apt, no network), it says so and exits 0: the rendering test then
# skips with a clear reason instead of failing the whole test run.
set -u

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "ensure-chromium: chromium not found and not root; install it with: sudo apt-get install chromium" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: chromium not found and no apt-get; install Chromium by hand to run the report rendering test" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
# Other jobs may hold the dpkg lock briefly; wait for it rather than failing.
APT=(apt-get -o DPkg::Lock::Timeout=300 -y -qq)

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

# Refresh the package lists once, and only when they do not offer chromium (or the install fails
# because they are stale). apt's chatter goes to $LOG, shown only if the install fails.
updated=0
if ! apt-cache policy chromium 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    "${APT[@]}" update >>"$LOG" 2>&1 && updated=1
fi
if ! "${APT[@]}" install --no-install-recommends chromium >>"$LOG" 2>&1; then
    if [ "$updated" = "0" ]; then
        "${APT[@]}" update >>"$LOG" 2>&1
        "${APT[@]}" install --no-install-recommends chromium >>"$LOG" 2>&1
    fi
fi

if command -v chromium >/dev/null 2>&1; then
    echo "ensure-chromium: installed $(chromium --version 2>/dev/null)"
else
    tail -n 5 "$LOG" >&2
    echo "ensure-chromium: could not install chromium; the report rendering test will be skipped" >&2
fi
exit 0
