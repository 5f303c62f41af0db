#!/bin/sh
# Make a `prometheus` binary available for the dashboard integration test (tests/promtools.py).
#
# Idempotent: does nothing when `prometheus` is already on PATH. Otherwise, as root on a Debian/Ubuntu
# machine, installs Debian's `prometheus` package. Containers have no init system, so the package's
# service start is denied through a policy-rc.d for the duration of the install, and any server the
# package managed to start anyway is stopped: the test starts its own Prometheus on a free port.
#
# Always exits 0; when it cannot install, it says why and the integration test skips.
set -u

if command -v prometheus >/dev/null 2>&1; then
    echo "ensure-prometheus: $(command -v prometheus) already installed"
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "ensure-prometheus: prometheus not on PATH and not root; install it with 'apt-get install prometheus' (dashboard integration test will skip)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-prometheus: prometheus not on PATH and no apt-get; install Prometheus >= 2.40 by hand (dashboard integration test will skip)"
    exit 0
fi

# Deny service starts during the install (exit 101 = "action forbidden" for invoke-rc.d and
# deb-systemd-invoke). Keep an existing policy (Docker images often ship one) untouched.
POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=""
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$POLICY" && chmod 755 "$POLICY" && OWN_POLICY=1
fi

# Another apt may be running (other setup scripts): wait for dpkg's lock instead of failing.
LOCK_WAIT="-o DPkg::Lock::Timeout=300"
status=0
echo "ensure-prometheus: installing Debian package 'prometheus'"
apt-get $LOCK_WAIT update -qq || status=$?
if [ "$status" = "0" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get $LOCK_WAIT install -y -qq --no-install-recommends prometheus \
        </dev/null >/tmp/ensure-prometheus.log 2>&1 || status=$?
fi

[ -n "$OWN_POLICY" ] && rm -f "$POLICY"

# If a service manager started the packaged server anyway, stop it: it would hold port 9090 and
# scrape nothing useful. Only the package's own daemon (run as user 'prometheus') is stopped.
if command -v pgrep >/dev/null 2>&1; then
    for pid in $(pgrep -u prometheus -x prometheus 2>/dev/null); do
        echo "ensure-prometheus: stopping the packaged server started by the install (pid $pid)"
        kill "$pid" 2>/dev/null || true
    done
fi

if [ "$status" != "0" ] || ! command -v prometheus >/dev/null 2>&1; then
    echo "ensure-prometheus: install failed (status $status, see /tmp/ensure-prometheus.log); dashboard integration test will skip"
    exit 0
fi
echo "ensure-prometheus: $(prometheus --version 2>&1 | head -n 1)"
exit 0
