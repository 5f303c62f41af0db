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
