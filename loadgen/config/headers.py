"""Extra HTTP headers sent on every request to the server under test (``--header 'Name: value'``,
``request.headers``): their syntax, and which values are credentials that no output repeats.

A gateway in front of vLLM or SGLang may want its own key (``X-Api-Key``), a tenant, a route.
The headers go to the start check, the streams and the server watch alike (``loadgen.wire.client``).
A value whose name looks like a credential (``authorization``, or a name containing ``key``,
``token`` or ``secret``, any case) is replaced by ``<hidden>`` in summary.json's scenario, and by
``<header NAME>`` in any line said or logged (``loadgen.run.runtime.Runtime.redact``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loadgen.errors import ConfigError

FLAG = "--header"
KEY = "request.headers"
HIDDEN = "<hidden>"
# RFC 9110 token characters: what a header name may hold
_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CREDENTIAL_WORDS = ("key", "token", "secret")
# headers the client writes itself: a second copy would contradict it (the stream would break)
OWNED = {"content-type": "the client sends JSON", "content-length": "the client frames the body",
         "accept-encoding": "streams must not be compressed (identity)", "host": "the client names --host",
         "transfer-encoding": "the client frames the body"}


def is_credential(name: str) -> bool:
    """Does a header of this name carry a secret? ``authorization``, or a name containing
    ``key``, ``token`` or ``secret`` (case-insensitive: ``X-Api-Key``, ``X-Auth-Token``)."""
    low = name.lower()
    return low in ("authorization", "proxy-authorization") or any(w in low for w in _CREDENTIAL_WORDS)


def shown(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as summary.json shows them: credential values replaced by ``<hidden>``."""
    return {name: HIDDEN if is_credential(name) else value for name, value in headers.items()}


def url_shown(url: str) -> str:
    """``url`` as outputs show it: the password of its user information (``http://u:PASS@host``)
    replaced by ``<hidden>``; a URL without one as it is."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{HIDDEN}@{parts.netloc.rpartition('@')[2]}"))


def secrets(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """(value, placeholder) of every credential header with a value, longest value first (so a
    value that contains another is replaced whole)."""
    found = [(value, f"<header {name}>") for name, value in headers.items() if is_credential(name) and value]
    return sorted(found, key=lambda pair: -len(pair[0]))


class _Placeholder(str):
    """Shown in an error message as is, without quotes (the secret it stands for is not shown)."""

    __repr__ = str.__str__


def _hidden_if_secret(name: str, value: Any) -> Any:
    return _Placeholder(HIDDEN) if is_credential(str(name)) else value


def check_header(key: str, name: Any, value: Any) -> tuple[str, str]:
    """One header checked: (name, value) as sent. ConfigError naming it and the fix."""
    fix = f"write {FLAG} 'Name: value', e.g. {FLAG} 'X-Api-Key: abc123' (or request.headers: {{X-Api-Key: abc123}})"
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(key, _hidden_if_secret(name, value), "needs a header name before the colon", fix)
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise ConfigError(key, name, "is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only, "
                          "no spaces)", fix)
    if name.lower() in OWNED:
        raise ConfigError(f"{key}.{name}", _hidden_if_secret(name, value), f"is set by the client: {OWNED[name.lower()]}",
                          f"leave {name} out of {FLAG} and request.headers")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{key}.{name}", _hidden_if_secret(name, value), "must be text",
                          f"quote the value, e.g. {name}: 'abc123'")
    text = str(value).strip()
    if "\r" in text or "\n" in text:
        raise ConfigError(f"{key}.{name}", _hidden_if_secret(name, text), "must not contain a line break (CR or LF): "
                          "it would end the header and start another", "give the value on one line")
    return name, text


def header_mapping(key: str, value: Any) -> dict[str, str]:
    """``request.headers``: a mapping of header names to text values; a name given twice in
    different case is one header given twice, refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "must be a mapping of header names to values",
                          "e.g. request.headers: {X-Api-Key: abc123}")
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for raw_name, raw_value in value.items():
        name, text = check_header(key, raw_name, raw_value)
        if name.lower() in seen:
            raise ConfigError(f"{key}.{name}", _hidden_if_secret(name, text), f"is given twice (also as "
                              f"{seen[name.lower()]}); header names are case-insensitive", "give it once")
        seen[name.lower()] = name
        out[name] = text
    return out


def parse_flags(items: Iterable[str]) -> dict[str, str]:
    """``--header 'Name: value'`` (repeatable) -> {Name: value}. Bad syntax (no colon, no name, a
    line break in the value, a name given twice) is a ConfigError naming the value and the fix."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for item in items:
        name, colon, value = str(item).partition(":")
        where = f"{KEY} (from {FLAG})"
        looks_secret = is_credential(str(item)) or "bearer" in str(item).lower()
        if not colon or not name.strip():
            problem = "must be 'Name: value' with a colon" if not colon else "needs a header name before the colon"
            raise ConfigError(where, _Placeholder(HIDDEN) if looks_secret else item, problem,
                              f"e.g. {FLAG} 'X-Api-Key: abc123'")
        try:
            name, value = check_header(KEY, name, value)
        except ConfigError as e:
            raise ConfigError(f"{e.key} (from {FLAG})", e.value, e.problem, e.fix) from None
        if name.lower() in seen and out[seen[name.lower()]] != value:
            raise ConfigError(f"{KEY}.{name} (from {FLAG})", _hidden_if_secret(name, value), "is given twice with "
                              "different values", f"pass {FLAG} '{name}: ...' once")
        seen[name.lower()] = name
        out[name] = value
    return out
