#!/bin/sh
# docker-base-image.sh [--import]
#
# A Debian bookworm base image made locally, for machines that reach Debian's and PyPI's package
# mirrors but no container registry (nothing can be pulled, so `FROM python:3.11-slim` fails).
#   1. debootstrap (minbase) a bookworm root filesystem with python3, python3-venv and
#      ca-certificates, drop apt's downloaded .debs, lists, docs and man pages, and pack it as
#      $CACHE/bookworm-python3-KEY.tar;
#   2. with --import, `docker import` it as llm-loadgen-base:bookworm-KEY (a running daemon needed).
# KEY = first 12 hex digits of sha256(the recipe: RECIPE, SUITE, VARIANT, PACKAGES, STRIP, mirror):
# a changed recipe makes a new tarball and tag (older tarballs are deleted); an unchanged one is
# reused (debootstrap takes ~1-2 min, the import ~3 s). Bump RECIPE for any other change to the steps.
# Stdout is one line, the image tag (with --import) or the tarball path (without): BASE=$(...);
# progress goes to stderr.
#
# The mirror is the machine's own apt source for Debian (deb822 or one-line form), so the same
# mirror (or proxy) that apt-get uses here serves debootstrap too. Needs root and debootstrap
# (scripts/ensure-docker.sh installs it). Exits non-zero with the reason when it cannot.
set -eu
RECIPE=1
SUITE=bookworm
VARIANT=minbase
PACKAGES=python3,python3-venv,ca-certificates
# Not needed at run time (apt keeps working: apt-get update fetches fresh lists).
STRIP="var/cache/apt/archives/*.deb var/lib/apt/lists/* usr/share/doc/* usr/share/man/* usr/share/info/* var/log/*.log var/cache/debconf/*-old"
CACHE=${LLM_LOADGEN_CACHE:-/var/cache/llm-loadgen}/docker-base
REPO=llm-loadgen-base
TAG="docker-base-image"

die() { echo "$TAG: $*" >&2; exit 1; }
[ "$(id -u)" = "0" ] || die "needs root (debootstrap makes device nodes and chroots): run it with sudo"
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] \
    || die "debootstrap not found: run scripts/ensure-docker.sh (or apt-get install debootstrap)"
PATH=$PATH:/usr/sbin:/sbin

# The first Debian archive URI apt uses here (not -security, not -updates).
apt_mirror() {
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }'
    grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
        | sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{ print $1 }'
}
MIRROR=$(apt_mirror | grep -E '/debian/?$' | head -n 1 || true)
[ -n "$MIRROR" ] || die "no Debian archive in /etc/apt/sources* to debootstrap from: set one up for apt first"

KEY=$(echo "$RECIPE $SUITE $VARIANT $PACKAGES $STRIP $MIRROR" | sha256sum | cut -c1-12)
TARBALL=$CACHE/$SUITE-python3-$KEY.tar
IMAGE=$REPO:$SUITE-$KEY
mkdir -p "$CACHE"

if [ ! -s "$TARBALL" ]; then
    exec 9>"$CACHE/.lock"
    flock 9  # a second caller waits for the first one's tarball instead of building its own
fi
if [ ! -s "$TARBALL" ]; then
    WORK=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    cleanup() {  # debootstrap unmounts what it mounted, except when it is killed: make sure
        grep -o " $WORK/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
        rm -rf --one-file-system "$WORK"
    }
    trap cleanup EXIT INT TERM
    echo "$TAG: debootstrap $SUITE ($PACKAGES) from the apt mirror into $WORK (about a minute)" >&2
    LOG=$CACHE/debootstrap.log
    if ! debootstrap --variant="$VARIANT" --include="$PACKAGES" "$SUITE" "$WORK/root" "$MIRROR" >"$LOG" 2>&1; then
        tail -n 15 "$LOG" >&2
        die "debootstrap failed (full log: $LOG)"
    fi
    # shellcheck disable=SC2086  # unquoted on purpose: the patterns glob inside the rootfs
    (cd "$WORK/root" && rm -rf $STRIP)
    tar --numeric-owner --xattrs -C "$WORK/root" -cf "$TARBALL.part" .
    mv "$TARBALL.part" "$TARBALL"
    find "$CACHE" -maxdepth 1 -name "$SUITE-python3-*.tar" ! -name "${TARBALL##*/}" -delete
    echo "$TAG: cached $TARBALL ($(du -h "$TARBALL" | cut -f1))" >&2
fi

if [ "${1:-}" != "--import" ]; then
    echo "$TARBALL"
    exit 0
fi
docker info >/dev/null 2>&1 || die "no Docker daemon answers on this machine: start dockerd first"
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        "$TARBALL" "$IMAGE" >/dev/null
    echo "$TAG: imported $TARBALL as $IMAGE" >&2
    for old in $(docker image ls --format '{{.Repository}}:{{.Tag}}' "$REPO"); do  # earlier recipes
        [ "$old" = "$IMAGE" ] || docker image rm "$old" >/dev/null 2>&1 || true
    done
fi
echo "$IMAGE"
