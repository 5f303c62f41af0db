#!/bin/sh
# ensure-debian-package.sh PACKAGE BINARY PURPOSE
#
# Make BINARY available (on PATH or in /usr/sbin) by installing Debian's PACKAGE when it is missing.
# Used for the tools integration tests and benchmarks drive (prometheus, chromium, nginx); CI
# starts on a bare machine, so the project installs them itself.
#
# Idempotent. Installs only as root with apt-get. Containers have no init system, so service
# starts are denied through a policy-rc.d for the duration of the install (an existing policy is
# left alone), and any daemon of BINARY that appeared during the install is stopped: tests start
# their own instance on a free 127.0.0.1 port. Always exits 0; when it cannot install, it says why
# (PURPOSE names what will then be skipped).
set -u
PACKAGE=$1 BINARY=$2 PURPOSE=$3
TAG="ensure-$PACKAGE"

found() { command -v "$BINARY" >/dev/null 2>&1 || [ -x "/usr/sbin/$BINARY" ]; }

if found; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$TAG: $BINARY not found and cannot install it here (needs root and apt-get):" \
         "run 'apt-get install $PACKAGE'; $PURPOSE will be skipped"
    exit 0
fi

POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=""
if [ ! -e "$POLICY" ]; then  # exit 101 = "action forbidden" for invoke-rc.d / deb-systemd-invoke
    printf '#!/bin/sh\nexit 101\n' > "$POLICY" && chmod 755 "$POLICY" && OWN_POLICY=1
fi
before=$(pgrep -x "$BINARY" 2>/dev/null | tr '\n' ' ')

LOG=/tmp/$TAG.log
APT="apt-get -o DPkg::Lock::Timeout=300"  # another apt may be running: wait for dpkg's lock
echo "$TAG: installing Debian package '$PACKAGE'"
status=0
# Refresh the package lists only when they do not offer the package (or they are stale).
if ! apt-cache policy "$PACKAGE" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    $APT update -qq >"$LOG" 2>&1
fi
DEBIAN_FRONTEND=noninteractive $APT install -y -qq --no-install-recommends "$PACKAGE" </dev/null >>"$LOG" 2>&1 \
    || { $APT update -qq >>"$LOG" 2>&1
         DEBIAN_FRONTEND=noninteractive $APT install -y -qq --no-install-recommends "$PACKAGE" \
             </dev/null >>"$LOG" 2>&1; } || status=$?

[ -n "$OWN_POLICY" ] && rm -f "$POLICY"
for pid in $(pgrep -x "$BINARY" 2>/dev/null); do
    case " $before " in *" $pid "*) ;; *)
        echo "$TAG: stopping the packaged $BINARY the install started (pid $pid)"
        kill "$pid" 2>/dev/null || true ;;
    esac
done

if [ "$status" != "0" ] || ! found; then
    tail -n 5 "$LOG"
    echo "$TAG: install failed (status $status, see $LOG); $PURPOSE will be skipped"
    exit 0
fi
echo "$TAG: installed $PACKAGE"
