#!/bin/sh
# Make an `nginx` binary available for the client benchmark (bench/flood.py): a static SSE body
# served by nginx is a token source far faster than any Python client, so it never limits it.
#
# Idempotent: does nothing when `nginx` is already on PATH (or in /usr/sbin). Otherwise, as root on
# a Debian/Ubuntu machine, installs Debian's `nginx` package. Containers have no init system, so the
# package's service start is denied through a policy-rc.d for the duration of the install, and any
# server the package managed to start anyway is stopped: the benchmark starts its own nginx with
# its own config in a temporary directory, on an ephemeral 127.0.0.1 port.
#
# Always exits 0; when it cannot install, it says why and the flood benchmark is skipped.
set -u

for candidate in nginx /usr/sbin/nginx; do
    if command -v "$candidate" >/dev/null 2>&1; then
        echo "ensure-nginx: $(command -v "$candidate") already installed"
        exit 0
    fi
done
if [ "$(id -u)" != "0" ]; then
    echo "ensure-nginx: nginx not found and not root; install it with 'apt-get install nginx' (the flood benchmark will be skipped)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-nginx: nginx not found and no apt-get; install nginx by hand (the flood benchmark will be skipped)"
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
echo "ensure-nginx: installing Debian package 'nginx'"
apt-get $LOCK_WAIT update -qq || status=$?
if [ "$status" = "0" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get $LOCK_WAIT install -y -qq --no-install-recommends nginx \
        </dev/null >/tmp/ensure-nginx.log 2>&1 || status=$?
fi

[ -n "$OWN_POLICY" ] && rm -f "$POLICY"

# If a service manager started the packaged server anyway, stop it: it would hold port 80. Only the
# package's own daemon is stopped (its master process is named in its pid file).
if [ -s /run/nginx.pid ]; then
    pid=$(cat /run/nginx.pid)
    echo "ensure-nginx: stopping the packaged server started by the install (pid $pid)"
    kill "$pid" 2>/dev/null || true
fi

if [ "$status" != "0" ] || ! [ -x /usr/sbin/nginx ]; then
    echo "ensure-nginx: install failed (status $status, see /tmp/ensure-nginx.log); the flood benchmark will be skipped"
    exit 0
fi
echo "ensure-nginx: $(/usr/sbin/nginx -v 2>&1 | head -n 1)"
exit 0
