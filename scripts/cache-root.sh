# Sourced by the ensure-*.sh scripts: where slow one-time installs are cached, OUTSIDE the clone.
#
# CACHE_ROOTS: /var/cache/llm-loadgen, else ${XDG_CACHE_HOME:-~/.cache}/llm-loadgen when /var/cache
# is not writable. writable_cache_root WHAT: prints the first root that can be created and written,
# or says (as "$TAG: ...", on stderr) that WHAT will be skipped and returns 1; the caller then exits
# 0 (a skip, not a failure): ROOT=$(writable_cache_root "the tests") || exit 0

CACHE_ROOTS=(/var/cache/llm-loadgen "${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/llm-loadgen")

# find_cached FILE [MARKER]: prints ROOT/FILE for the first root holding it as an executable (and,
# when given, ROOT/MARKER too: an install finished); returns 1 when no root does.
find_cached() {
    local root
    for root in "${CACHE_ROOTS[@]}"; do
        if [ -x "$root/$1" ] && { [ -z "${2:-}" ] || [ -f "$root/$2" ]; }; then
            echo "$root/$1"
            return 0
        fi
    done
    return 1
}

writable_cache_root() {
    local root
    for root in "${CACHE_ROOTS[@]}"; do
        if mkdir -p "$root" 2>/dev/null && [ -w "$root" ]; then
            echo "$root"
            return 0
        fi
    done
    echo "$TAG: no writable cache directory (tried ${CACHE_ROOTS[*]}); $1 will be skipped" >&2
    return 1
}

# begin_venv_install NAME FILE WHAT [--find]: the start every venv-installing ensure script shares.
# FILE (under NAME/, e.g. venv/bin/python) already installed (NAME/.installed): prints it and exits 0.
# With --find and nothing installed: says so and exits 1. No venv module in $PYTHON, or no writable
# cache root: says that WHAT will be skipped and exits 0. Else takes NAME's lock (waiting for another
# install), looks once more, and sets DEST (ROOT/NAME, emptied) and LOG for the install; fail MESSAGE
# then ends it (the log's tail, DEST removed, exit 1). Needs TAG, PYTHON and a say function.
begin_venv_install() {
    local name=$1 file=$2 what=$3 root found
    if found=$(find_cached "$name/$file" "$name/.installed"); then
        echo "$found"
        exit 0
    fi
    if [ "${4:-}" = "--find" ]; then
        say "$name is not installed (looked in ${CACHE_ROOTS[*]}); run ${ENSURE_COMMAND:-scripts/$TAG.sh} (or make system-tools)"
        exit 1
    fi
    if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        say "'$PYTHON' has no venv/ensurepip module; $what will be skipped"
        exit 0
    fi
    root=$(writable_cache_root "$what") || exit 0
    exec 9>"$root/$name.lock"
    if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
        say "another install of $name is running: waiting for it"
        flock 9
    fi
    if found=$(find_cached "$name/$file" "$name/.installed"); then
        echo "$found"
        exit 0
    fi
    DEST=$root/$name
    LOG=$root/$name.install.log
    rm -rf "$DEST" && mkdir -p "$DEST"
    : >"$LOG"
}

fail() {
    say "$1 (log: $LOG)"
    tail -n 20 "$LOG" >&2 || true
    rm -rf "$DEST"
    exit 1
}
