"""Field checkers for scenario values: each takes (dotted key, raw value) and returns the typed value
or raises ConfigError naming the key, the value and the fix. Pure: no I/O.

Types are strict on purpose: ``true`` is not a number, ``"60"`` is not a number, ``60.0`` is not a
concurrency. YAML 1.1 (PyYAML) reads ``1e3`` as the *string* "1e3" (a float needs a dot), so text
that looks like a number gets a fix that says how to write it.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loadgen.config.schema import FrozenDict
from loadgen.errors import ConfigError

Check = Callable[[str, Any], Any]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Body fields the client owns. Overriding them from extra_body would silently break the exact
# token counts (max_tokens/min_tokens/ignore_eos) or the stream the measurements depend on.
RESERVED_BODY_KEYS = {
    "max_tokens": "set output_tokens instead: the client sends max_tokens = min_tokens = output_tokens",
    "max_completion_tokens": "set output_tokens instead",
    "min_tokens": "set output_tokens instead",
    "ignore_eos": "remove it: the client always sends ignore_eos so outputs have exactly output_tokens",
    "prompt": "remove it: prompts are generated from input_tokens and prompt.*",
    "messages": "remove it: prompts are generated from input_tokens and prompt.*",
    "model": "set the top-level model key instead",
    "stream": "remove it: requests always stream",
    "stream_options": "remove it: use request.continuous_usage",
    "n": "remove it: one choice per request is measured",
}


class Shown(str):
    """A value shown in a message as is, without quotes: a placeholder or an abbreviation."""

    def __repr__(self) -> str:
        return str(self)


def _numeric_text(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _as_number(key: str, value: Any, integer: bool, fix: str) -> int | float:
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool):
        raise ConfigError(key, value, f"must be {kind}, not true/false", fix)
    if isinstance(value, int):
        return value if integer else float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(key, value, "must be a finite number", fix)
        if integer:
            better = f"write {int(value)}" if value.is_integer() else fix
            raise ConfigError(key, value, "must be a whole number", better)
        return value
    if isinstance(value, str):
        parsed = _numeric_text(value.strip())
        if parsed is not None and (parsed.is_integer() or not integer):
            shown = int(parsed) if parsed.is_integer() else parsed
            better = f"write {shown} as plain digits without quotes; {value!r} is read as text"
            raise ConfigError(key, value, f"must be {kind}, not text", better)
        raise ConfigError(key, value, f"must be {kind}, not text", fix)
    raise ConfigError(key, value, f"must be {kind}, not a {type(value).__name__}", fix)


def _bound_problem(
    value: float, gt: float | None, ge: float | None, lt: float | None, le: float | None
) -> str | None:
    if gt is not None and not value > gt:
        return f"must be > {gt:g}"
    if ge is not None and not value >= ge:
        return f"must be >= {ge:g}"
    if lt is not None and not value < lt:
        return f"must be < {lt:g}"
    if le is not None and not value <= le:
        return f"must be <= {le:g}"
    return None


def number(
    fix: str,
    *,
    integer: bool = False,
    nullable: bool = False,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> Check:
    """A number (int or float; stored as float) or, with ``integer``, a whole number (int)."""

    def check(key: str, value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise ConfigError(key, value, "must be set, not null/empty", fix)
        n = _as_number(key, value, integer, fix)
        problem = _bound_problem(n, gt, ge, lt, le)
        if problem:
            raise ConfigError(key, value, problem, fix)
        return n

    return check


def integer(fix: str, **kwargs: Any) -> Check:
    return number(fix, integer=True, **kwargs)


def boolean(fix: str = "write true or false", *, nullable: bool = False) -> Check:
    def check(key: str, value: Any) -> bool | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "on", "off"):
            raise ConfigError(key, value, "must be true or false, not text", "write it without quotes")
        raise ConfigError(key, value, "must be true or false", fix)

    return check


def text(fix: str, *, nullable: bool = False, forbid: str = "") -> Check:
    """A non-empty string without control characters (and without any char in ``forbid``)."""

    def check(key: str, value: Any) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise ConfigError(key, value, f"must be text, not {type(value).__name__}", fix)
        if not value.strip():
            raise ConfigError(key, value, "must not be empty", fix)
        bad = [c for c in value if not c.isprintable() or c in forbid]
        if bad:
            raise ConfigError(key, value, f"must not contain {bad[0]!r}", fix)
        return value

    return check


def choice(options: Sequence[str], fix: str) -> Check:
    def check(key: str, value: Any) -> str:
        if isinstance(value, str) and value in options:
            return value
        allowed = ", ".join(options)
        near = difflib.get_close_matches(str(value).lower(), options, n=1, cutoff=0.5)
        better = f"did you mean {near[0]!r}? {fix}" if near else fix
        raise ConfigError(key, value, f"must be one of {allowed}", better)

    return check


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z]{2,}", text.lower())}


def api_name(paths: Mapping[str, str]) -> Check:
    """One of ``paths``' names (e.g. chat). Given a path or URL instead (/v1/chat/completions), the
    fix names the API that path belongs to: the one whose path's words it holds, the most of them."""
    names = tuple(paths)
    fix = ", ".join(f"{n} for {p}" for n, p in paths.items())
    plain = choice(names, fix)

    def check(key: str, value: Any) -> str:
        if not isinstance(value, str) or value in names:
            return plain(key, value)
        given = _words(value)
        fits = [n for n in names if _words(paths[n]) <= given]
        if not fits:
            return plain(key, value)
        meant = max(fits, key=lambda n: len(_words(paths[n])))
        problem = f"must be one of {', '.join(names)}" + (": the API's name, not its path" if "/" in value else "")
        raise ConfigError(key, value, problem, f"did you mean {meant!r}? {fix}")

    return check


def env_var_name(key: str, value: Any) -> str | None:
    """The NAME of an environment variable, or null. A value that is not a valid name may be the
    secret itself, so the message never repeats it."""
    fix = "give the NAME of the variable that holds the key, e.g. OPENAI_API_KEY, never the key itself"
    if value is None:
        return None
    if isinstance(value, str) and _ENV_NAME.fullmatch(value):
        return value
    shown = Shown(f"<hidden: {len(value)} characters>") if isinstance(value, str) else value
    raise ConfigError(key, shown, "must be an environment variable name (letters, digits, _)", fix)


def url_list(key: str, value: Any) -> tuple[str, ...]:
    """A list of http(s) URLs (e.g. DCGM exporters' /metrics, one per node); null or [] for none."""
    fix = "write a list of URLs, e.g. [http://gpu-node-1:9400/metrics]; [] for none"
    if value is None:
        return ()
    if isinstance(value, str):
        raise ConfigError(key, value, "must be a list of URLs", f"write [{value}]")
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, value, "must be a list of URLs", fix)
    for i, url in enumerate(value):
        if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/]+\S*", url):
            raise ConfigError(f"{key}[{i}]", url, "must be an http:// or https:// URL", fix)
    return tuple(value)


def token_id_range(key: str, value: Any) -> tuple[int, int]:
    fix = "write [low, high] with 0 <= low < high, e.g. [1000, 30000]"
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(key, value, "must be a list of two token ids [low, high]", fix)
    lo = _as_number(f"{key}[0]", value[0], True, fix)
    hi = _as_number(f"{key}[1]", value[1], True, fix)
    if lo < 0:
        raise ConfigError(key, list(value), "low must be >= 0", fix)
    if lo >= hi:
        raise ConfigError(key, list(value), "low must be < high (ids are drawn from [low, high))", fix)
    return (int(lo), int(hi))


def stage_list(key: str, value: Any) -> tuple[int, ...] | None:
    """null, or strictly increasing positive concurrencies (a sweep goes up; a repeat is a typo)."""
    fix = "e.g. [1, 4, 16, 32], or null to use start/factor/max"
    if value is None:
        return None
    if isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool):
        parts = str(value).replace(" ", "").split(",")
        shown = ", ".join(parts)
        raise ConfigError(key, value, "must be a list of concurrencies", f"write [{shown}]")
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, value, "must be a list of concurrencies", fix)
    if not value:
        raise ConfigError(key, list(value), "must not be empty", fix)
    out = [int(_as_number(f"{key}[{i}]", v, True, fix)) for i, v in enumerate(value)]
    for i, c in enumerate(out):
        if c < 1:
            raise ConfigError(f"{key}[{i}]", c, "must be >= 1 (a concurrency)", fix)
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ConfigError(
            key, list(value), "must be strictly increasing (no repeats)", f"write {sorted(set(out))}"
        )
    return tuple(out)


def rate_list(key: str, value: Any) -> tuple[float, ...] | None:
    """null, or strictly increasing rates > 0 in requests/s (a sweep goes up; a repeat is a typo)."""
    fix = "e.g. [1, 2, 4, 8] requests/s, or null"
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(key, value, "must be a non-empty list of rates in requests/s", fix)
    out = [float(_as_number(f"{key}[{i}]", v, False, fix)) for i, v in enumerate(value)]
    for i, r in enumerate(out):
        if not (r > 0 and math.isfinite(r)):
            raise ConfigError(f"{key}[{i}]", r, "must be > 0 requests/s", fix)
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ConfigError(key, list(value), "must be strictly increasing (no repeats)",
                          f"write {sorted(set(out))}")
    return tuple(out)


def body_mapping(key: str, value: Any) -> FrozenDict:
    """Extra request body fields: a mapping with text keys, none of them owned by the client."""
    if value is None:
        return FrozenDict()
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "must be a mapping of body fields", "e.g. {temperature: 0}")
    for k in value:
        if not isinstance(k, str):
            raise ConfigError(key, k, "field names must be text", f"quote the name: '{k}'")
        if k in RESERVED_BODY_KEYS:
            raise ConfigError(f"{key}.{k}", value[k], "is set by the client", RESERVED_BODY_KEYS[k])
    return FrozenDict(copy.deepcopy(dict(value)))
