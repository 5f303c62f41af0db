"""What a server accepts, and the request body we send it: the adaptations keep the intent.

Pure: no I/O. The start check (``loadgen.server.start_check``) detects the server, sends one probe request
shaped exactly like the run's, and when the server refuses it asks ``adapt`` for the next try:

- vendor fields the server names in its refusal (``ignore_eos``, ``min_tokens``,
  ``continuous_usage_stats``, ``stream_options``) are dropped, exactly those; output length is
  then asked (``max_tokens``), not forced, and the token-mismatch counts show what the server did;
- token-ID prompts refused (IDs outside a small vocabulary, or a server that takes only text):
  IDs are drawn inside the vocabulary when the server reports it (llama.cpp ``meta.n_vocab``) or
  when the start check can find its end (``vocabulary_search``: vLLM names the refused ID and does
  not report its vocabulary), else prompts become text calibrated against the server's usage, like
  the chat path's.

``Compat`` is what was decided: shown at start, written to summary.json (``compat``) and shipped to
workers with the phase, so every process sends the same body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import orjson

from loadgen.stats.failures import answer_words

VENDOR_FIELDS = ("ignore_eos", "min_tokens", "continuous_usage_stats", "stream_options")
FORCING_FIELDS = ("ignore_eos", "min_tokens")  # without them the output length is only asked
# request.compat (loadgen.config COMPAT_SETTINGS): auto probes and adapts; vllm, sglang, llamacpp
# and openai send everything that forces lengths; openai-strict sends standard fields and text.

_TOKEN_REFUSAL = re.compile(r"invalid token|token id|out of (the )?vocab|vocab(ulary)? size|token.*out of range",
                            re.I)
_REFUSED_ID = re.compile(r"token id\D{0,12}?(\d+)", re.I)  # vLLM: "Token id 29386 is out of vocabulary"
# sglang-router 0.3 (Rust, serde): "prompt: data did not match any variant of untagged enum StringOrArray"
_STRING_ONLY = re.compile(r"valid string|must be a string|str type expected|expected (a )?string|"
                          r"should be (a )?(valid )?str|enum StringOrArray", re.I)


@dataclass(frozen=True)
class Compat:
    server: str = "openai"  # vllm | sglang | llamacpp | openai | openai-strict
    detected_by: str = "default"  # owned_by | metrics | scenario | probe | default
    prompt_kind: str = "token_ids"  # completions: token_ids | text (chat prompts are always text)
    token_id_range: tuple[int, int] | None = None  # None: the scenario's prompt.token_id_range
    dropped_fields: tuple[str, ...] = ()
    adaptations: tuple[str, ...] = field(default=())  # one line per change made, for the user

    @property
    def output_forced(self) -> bool:
        return not any(f in self.dropped_fields for f in FORCING_FIELDS)

    def to_dict(self) -> dict:
        return {"server": self.server, "detected_by": self.detected_by, "prompt_kind": self.prompt_kind,
                "token_id_range": list(self.token_id_range) if self.token_id_range else None,
                "dropped_fields": list(self.dropped_fields), "output_forced": self.output_forced,
                "adaptations": list(self.adaptations)}

    @classmethod
    def from_dict(cls, d: dict) -> Compat:
        rng = d.get("token_id_range")
        return cls(d["server"], d["detected_by"], d["prompt_kind"], tuple(rng) if rng else None,
                   tuple(d["dropped_fields"]), tuple(d.get("adaptations", ())))

    def describe(self) -> str:
        """The start line's account of what is sent."""
        prompts = {"token_ids": "token-ID prompts", "text": "text prompts (calibrated on usage)"}[self.prompt_kind]
        if self.prompt_kind == "token_ids" and self.token_id_range:
            prompts += f" in [{self.token_id_range[0]}, {self.token_id_range[1]})"
        output = "forced output length" if self.output_forced else "output length asked, not forced"
        dropped = f"; not sent: {', '.join(self.dropped_fields)}" if self.dropped_fields else ""
        return f"server {self.server} ({self.detected_by}): {prompts}, {output}{dropped}"


def initial(setting: str, owned_by: str | None, flavor: str | None, n_vocab: int | None,
            id_range: tuple[int, int]) -> Compat:
    """The starting point from ``request.compat`` and what the server said about itself."""
    if setting != "auto":
        server, how = setting, "scenario"
    elif owned_by in ("vllm", "sglang", "llamacpp"):
        server, how = owned_by, "owned_by"
    elif flavor in ("vllm", "sglang"):
        server, how = flavor, "metrics"
    else:
        server, how = "openai", "default"
    compat = Compat(server, how)
    if server == "openai-strict":
        compat = replace(compat, prompt_kind="text", dropped_fields=VENDOR_FIELDS)
    fitted = fit_range(id_range, n_vocab)
    if fitted != tuple(id_range):
        compat = replace(compat, token_id_range=fitted, adaptations=(
            f"token IDs drawn from [{fitted[0]}, {fitted[1]}): the vocabulary has {n_vocab} tokens",))
    return compat


def fit_range(id_range: tuple[int, int], n_vocab: int | None) -> tuple[int, int]:
    """``id_range`` cut to the vocabulary: [min(lo, n_vocab // 4), min(hi, n_vocab)). Low IDs are
    avoided (special tokens live there) as long as a quarter of the vocabulary is left."""
    lo, hi = id_range
    if not n_vocab or hi <= n_vocab:
        return (lo, hi)
    return (min(lo, n_vocab // 4), n_vocab)


def sent_fields(body: dict) -> set[str]:
    fields = set(body)
    fields.update(body.get("stream_options") or {})
    return fields


def adapt(compat: Compat, status: int | None, message: str, body: dict) -> Compat | None:
    """The next Compat to try after the server refused ``body`` with (``status``, ``message``), or
    None when nothing we could change would help (the refusal is quoted to the user)."""
    if status not in (400, 422):
        return None
    named = [f for f in VENDOR_FIELDS if f in sent_fields(body) and re.search(rf"\b{f}\b", message)]
    if "continuous_usage_stats" in named and "stream_options" in named:
        named.remove("stream_options")  # "stream_options.continuous_usage_stats": only the inner key
    if named:
        return replace(compat, server="openai-strict" if compat.server == "openai" else compat.server,
                       detected_by="probe" if compat.server == "openai" else compat.detected_by,
                       dropped_fields=tuple(dict.fromkeys(compat.dropped_fields + tuple(named))),
                       adaptations=compat.adaptations + (f"not sent: {', '.join(named)} (the server refused "
                                                         f"{'it' if len(named) == 1 else 'them'} by name)",))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and (_TOKEN_REFUSAL.search(message) or _STRING_ONLY.search(message)):
        return replace(compat, prompt_kind="text", adaptations=compat.adaptations + (
            "text prompts calibrated on usage: the server refused token-ID prompts",))
    return None


def refused_token_id(message: str) -> int | None:
    """The token ID a refusal names as outside the vocabulary (vLLM), else None."""
    if not _TOKEN_REFUSAL.search(message):
        return None
    m = _REFUSED_ID.search(message)
    return int(m.group(1)) if m else None


def vocabulary_search(good: int, bad: int):
    """The vocabulary's end by bisection over one-token prompts: a generator that yields the ID to
    try next and is sent whether the server took it (True) or refused it as out of vocabulary
    (False); it returns n_vocab, the smallest refused ID once every smaller one tried was taken.
    ``good`` is an ID the server takes, ``bad`` one it refused (``good < bad``); about
    log2(bad - good) tries (15 for a refused ID near 30,000). Pure: the start check sends."""
    while bad - good > 1:
        mid = (good + bad) // 2
        if (yield mid):
            good = mid
        else:
            bad = mid
    return bad


def with_vocabulary(compat: Compat, id_range: tuple[int, int], refused_id: int, n_vocab: int, tries: int) -> Compat:
    """``compat`` drawing token IDs inside a vocabulary of ``n_vocab`` found by ``vocabulary_search``."""
    fitted = fit_range(id_range, n_vocab)
    return replace(compat, token_id_range=fitted, adaptations=compat.adaptations + (
        f"token IDs drawn from [{fitted[0]}, {fitted[1]}): the server refused token ID {refused_id}; "
        f"one-token prompts found its vocabulary ends at {n_vocab} ({tries} tries)",))


def likely_fix(status: int | None, message: str, path: str, model: str | None) -> str:
    """The fix a user most likely needs for a refusal we could not adapt to."""
    m = message.lower()
    if status in (401, 403):
        return "check the API key (api_key_env) and that this key may use the model"
    if "model" in m and any(w in m for w in ("not found", "does not exist", "unknown", "no such")):
        return f"check --model (sent {model!r}; GET /v1/models lists what the server serves)"
    if status == 404:
        return f"check --host (the server's base URL) and --endpoint: the server has no {path}"
    if any(w in m for w in ("context length", "maximum context", "too long", "exceeds")):
        return "lower --input-tokens or --output-tokens to fit the server's context"
    if status == 413:
        return "a proxy in front of the server refuses the body size; raise its limit or lower --input-tokens"
    if status == 405:
        return f"check --host and --endpoint: the server does not take POST {path}"
    return "the server refuses the request as we send it; see request.compat and request.extra_body"


def refusal_line(host: str, path: str, ff, model: str | None) -> str:
    """The one line of a run stopped by ``loadgen.stats.failures.FailFast``: the server's reason and the fix."""
    kind, status = ff.first
    answer = answer_words(kind, status)
    reason = ff.message.removeprefix(f"HTTP {status}: ") if status is not None else ff.message
    return (f"{host} refused the first {ff.seen} requests (POST {path}: {answer}: {reason}); "
            f"{likely_fix(status, reason, path, model)}")


def build_body(scenario, model: str, prompt, compat: Compat, output_tokens: int | None = None) -> bytes:
    """The JSON body of one streaming request that forces exactly M = ``output_tokens`` tokens
    (default: the scenario's; ``max_tokens = min_tokens = M``, ``ignore_eos``), less the fields
    ``compat`` drops. A token-ID prompt (``loadgen.workload.prompts.TokenIds``, a numpy array) is written
    as a JSON array of integers."""
    m = scenario.output_tokens if output_tokens is None else output_tokens
    body: dict = {"model": model, "max_tokens": m, "min_tokens": m, "ignore_eos": True, "stream": True,
                  "stream_options": {"include_usage": True}}
    if scenario.request.continuous_usage:
        body["stream_options"]["continuous_usage_stats"] = True
    body["messages" if scenario.endpoint == "chat" else "prompt"] = prompt
    if scenario.request.thinking is not None:  # chat only (config check); extra_body may still override it
        body["chat_template_kwargs"] = {"enable_thinking": scenario.request.thinking}
    body.update(scenario.request.extra_body)
    raw = orjson.dumps(_without(body, compat.dropped_fields), option=orjson.OPT_SERIALIZE_NUMPY)  # TokenIds
    return bytes(memoryview(raw))  # exact size: orjson's result keeps its growth buffer (~32 bytes a token)


def _without(body: dict, dropped: tuple[str, ...]) -> dict:
    if not dropped:
        return body
    out = {k: v for k, v in body.items() if k not in dropped}
    if "stream_options" in out:
        opts = {k: v for k, v in out["stream_options"].items() if k not in dropped}
        if opts:
            out["stream_options"] = opts
        else:
            del out["stream_options"]
    return out
