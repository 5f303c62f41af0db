"""Simulator settings: defaults <- preset YAML <- command-line options, validated in one place.

A preset is ``loadgen/sim/presets/NAME.yaml`` (``--preset NAME``) or any YAML file path. Its keys
are the field names of ``SimConfig``; an unknown key or a bad value raises ``SimConfigError`` whose
one-line message names the key, the value and the fix (the CLI prints it and exits 2). This module
mirrors loadgen.errors.ConfigError on purpose instead of importing it: the simulator imports nothing
from the client side.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from loadgen.engine_model.engine import EngineParams
from loadgen.sim.faults import FAULT_KINDS

PRESET_DIR = Path(__file__).parent / "presets"


class SimConfigError(ValueError):
    def __init__(self, key: str, value: object, problem: str, fix: str = ""):
        self.key, self.value, self.problem, self.fix = key, value, problem, fix
        text = f"{key}: {problem}, got {value!r}"
        super().__init__(text + (f" ({fix})" if fix else ""))


@dataclass
class SimConfig:
    """Every setting; what each means, in which unit: ``HELP`` (also ``python -m loadgen.sim --help``)."""

    timing: str = "fixed"
    flavor: str = "vllm"
    model: str = "llmsim"
    served_models: str = ""  # comma-separated ids served instead of ``model`` (served_names)
    max_model_len: int = 32768
    kv_tokens: int = 1_000_000
    block_size: int = 16
    max_running: int = 256
    max_queued: int = 0
    time_scale: float = 1.0
    seed: int = 0
    eos_prob: float = 0.0
    default_max_tokens: int = 256
    # fixed model
    ttft_ms: float = 200.0
    itl_ms: float = 20.0
    tokens_per_chunk: int = 1
    # engine model
    step_base_ms: float = 10.0
    step_per_seq_ms: float = 0.1
    step_per_prefill_token_us: float = 20.0
    step_per_context_token_ns: float = 0.0
    step_per_prefill_pair_ns: float = 0.0
    step_batch_ms: list[list[float]] = field(default_factory=list)  # [[batch, ms], ...] measured knots
    prefill_chunk_tokens: int = 8192
    spec_accept: list[float] = field(default_factory=lambda: [1.0])
    admit_output_reserve: float = 0.0
    prefix_cache_tokens: int = 0
    prefix_block_tokens: int = 16
    cache_report: int = 1
    # a reasoning model (chat streams)
    reasoning_tokens: int = 0
    reasoning_field: str = "auto"
    reasoning_usage: int = 1
    # a stricter server than vLLM/SGLang (loadgen.sim.strict)
    reject_fields: str = ""
    prompt_token_ids: str = "accept"
    vocab_size: int = 0
    advertise_max_model_len: int = 1
    # a gateway in front of the server: every request but GET /health must carry this header
    require_header: str = ""
    # faults: kind -> per-request probability (loadgen.sim.faults.FAULT_MEANINGS)
    faults: dict[str, float] = field(default_factory=dict)
    stall_max_s: float = 60.0
    idle_timeout_s: float = 300.0
    network_delay_ms: float = 0.0
    # a server that drifts over the hours (a soak's known answer: docs/soak.md)
    drift_decode_pct_per_h: float = 0.0
    drift_prefill_pct_per_h: float = 0.0
    drift_kv_leak_tokens_per_h: float = 0.0

    def served_names(self) -> list[str]:
        """The model ids GET /v1/models lists: ``served_models``, else ``model``."""
        return [m.strip() for m in self.served_models.split(",") if m.strip()] or [self.model]

    def reasoning_key(self) -> str:
        """The reasoning delta's field name (``reasoning_field``; auto: vLLM reasoning, SGLang reasoning_content)."""
        if self.reasoning_field != "auto":
            return self.reasoning_field
        return "reasoning" if self.flavor == "vllm" else "reasoning_content"

    def engine_params(self) -> EngineParams:
        return EngineParams(
            kv_tokens=self.kv_tokens, block_size=self.block_size, max_running=self.max_running,
            max_queued=self.max_queued, prefill_chunk_tokens=self.prefill_chunk_tokens,
            step_base_s=self.step_base_ms / 1e3, step_per_seq_s=self.step_per_seq_ms / 1e3,
            step_per_prefill_token_s=self.step_per_prefill_token_us / 1e6,
            step_per_context_token_s=self.step_per_context_token_ns / 1e9,
            step_per_prefill_pair_s=self.step_per_prefill_pair_ns / 1e9,
            step_batch_s=tuple((float(b), ms / 1e3) for b, ms in self.step_batch_ms),
            spec_accept=tuple(self.spec_accept), admit_output_reserve=self.admit_output_reserve,
            seed=self.seed, prefix_cache_blocks=self.prefix_cache_tokens // self.prefix_block_tokens,
            prefix_block_tokens=self.prefix_block_tokens)


FIELDS = {f.name: f for f in dataclasses.fields(SimConfig)}
# What each setting means, with its unit. Times in ms/us are simulated (wall = simulated / time_scale);
# times in s are wall seconds. "engine:" settings apply to the engine timing model only.
HELP = {
    "timing": "timing model: fixed (each request on its own schedule: ttft_ms, itl_ms) or engine (one "
              "step clock shared by all requests: batching, chunked prefill, KV cache, preemption)",
    "flavor": "server to imitate: vllm or sglang (metric names, /get_server_info, preempt vs retract)",
    "model": "model id listed by GET /v1/models",
    "served_models": "comma-separated model ids GET /v1/models lists instead of model, e.g. base,my-lora "
                     "(base models or LoRA adapters); a request for another model is answered 404 as vLLM "
                     "does; empty: model only, and a request for any model is served",
    "max_model_len": "context length, tokens: prompt + max_tokens above it is answered 400",
    "kv_tokens": "KV cache capacity, tokens (reported to clients; enforced by the engine model)",
    "block_size": "KV cache block, tokens: a request's KV use is rounded up to whole blocks",
    "max_running": "engine: most requests decoding at once (the batch), requests",
    "max_queued": "engine: most requests waiting for the batch, requests; beyond it 503; 0 = unlimited",
    "time_scale": "simulated seconds per wall second: 10 runs the simulation 10x faster than wall time",
    "seed": "random seed of EOS lengths, faults and speculative accept counts",
    "eos_prob": "probability (0-1) that a request without ignore_eos stops early, at a seeded length",
    "default_max_tokens": "output tokens of a request that sets no max_tokens",
    "ttft_ms": "fixed: time to first token, ms",
    "itl_ms": "fixed: time per token, ms (a chunk of n tokens comes n x itl_ms after the previous one)",
    "tokens_per_chunk": "fixed: tokens per SSE chunk (as SGLang --stream-interval or speculative decoding send)",
    "step_base_ms": "engine: fixed time of one engine step, ms",
    "step_per_seq_ms": "engine: added step time per request in the batch, ms",
    "step_per_prefill_token_us": "engine: added step time per prompt token prefilled in the step, us",
    "step_per_context_token_ns": "engine: added step time per context token (prompt + generated so far) "
                                 "of each request decoding in the step, ns: the KV cache it reads; 0 = "
                                 "step time independent of context length",
    "step_per_prefill_pair_ns": "engine: added step time per prompt token prefilled in the step, per "
                                "earlier token of its sequence (attention over the prompt so far: a "
                                "prompt's cost grows with its square), ns; 0 = each prompt token costs alike",
    "step_batch_ms": "engine: the step's batch part as measured, comma-separated batch:time knots in ms "
                     "(e.g. 1:6.1,2:12.2,4:14.3) used instead of step_base_ms + step_per_seq_ms x batch: "
                     "straight lines between them, step_per_seq_ms beyond; none = the one line",
    "prefill_chunk_tokens": "engine: prompt tokens prefilled per step at most (chunked prefill), tokens",
    "spec_accept": "engine: speculative decoding, comma-separated P(1, 2, ... tokens accepted per step) "
                   "summing to 1; 1.0 = no speculation",
    "admit_output_reserve": "engine: KV headroom at admission, as a fraction (0-1) of the request's "
                            "remaining output tokens (SGLang-style; 0 = vLLM-style)",
    "prefix_cache_tokens": "engine: automatic prefix cache size, tokens; 0 = off",
    "prefix_block_tokens": "engine: tokens per prefix cache block (only whole blocks are reused)",
    "cache_report": "engine with a prefix cache: 1 puts usage.prompt_tokens_details.cached_tokens (prompt "
                    "tokens found in the cache at admission) in every usage, as vLLM "
                    "--enable-prompt-tokens-details and SGLang --enable-cache-report do; 0 leaves it out",
    "reasoning_tokens": "chat: the first R generated tokens of each streamed request are thinking, sent as "
                        "reasoning deltas before the answer's delta.content (at most the whole output; none "
                        "when the request sets chat_template_kwargs.enable_thinking false); 0 = a plain model",
    "reasoning_field": "the reasoning delta's field: reasoning_content (SGLang, older vLLM), reasoning "
                       "(vLLM >= 0.19.1) or auto (by flavor)",
    "reasoning_usage": "1: usage.completion_tokens_details.reasoning_tokens counts the thinking tokens sent "
                       "so far; 0: left out (the client then counts them from the stream)",
    "reject_fields": "comma-separated request fields answered 422 'Unexpected fields' (a strict server)",
    "prompt_token_ids": "accept or reject token-ID prompts (reject: 400, string prompts only)",
    "vocab_size": "vocabulary size: token IDs at or above it are refused with 400, as llama.cpp does; 0 = no check",
    "advertise_max_model_len": "1: GET /v1/models lists max_model_len; 0: it omits it (as many proxies do)",
    "require_header": "'Name: value' every request but GET /health must carry, as a gateway's key: "
                      "without the header 401, with another value 403; empty = none required",
    "stall_max_s": "wall seconds a stalled stream (fault stall) holds its socket",
    "idle_timeout_s": "wall seconds a keep-alive connection may sit idle before the server closes it",
    "drift_decode_pct_per_h": "fixed: itl_ms grows by this percent of itl_ms per simulated hour since the "
                              "server started (a slowing decode: the soak's known answer); 0 = steady",
    "drift_prefill_pct_per_h": "fixed: ttft_ms grows by this percent of ttft_ms per simulated hour since the "
                               "server started; 0 = steady",
    "drift_kv_leak_tokens_per_h": "the KV use /metrics reports grows by this many tokens per simulated hour "
                                  "since the server started, as a leak would; engine: the pool shrinks by "
                                  "as much (admission waits, decodes preempt; never below one max_model_len "
                                  "request); fixed: reported only; 0 = none",
    "network_delay_ms": "wall ms every generated byte is held after the engine timed it, as a network "
                        "would (outside /metrics' latencies; a client's TTFT and E2E grow by it)",
}
_CHOICES = {"timing": ("fixed", "engine"), "flavor": ("vllm", "sglang"), "prompt_token_ids": ("accept", "reject"),
            "reasoning_field": ("auto", "reasoning_content", "reasoning")}
_MIN = {  # key -> (lowest allowed, inclusive?)
    "max_model_len": (1, True), "kv_tokens": (1, True), "block_size": (1, True),
    "max_running": (1, True), "max_queued": (0, True), "time_scale": (0, False),
    "default_max_tokens": (1, True), "ttft_ms": (0, True), "itl_ms": (0, True),
    "tokens_per_chunk": (1, True), "step_base_ms": (0, False), "step_per_seq_ms": (0, True),
    "step_per_prefill_token_us": (0, True), "step_per_context_token_ns": (0, True),
    "step_per_prefill_pair_ns": (0, True),
    "prefill_chunk_tokens": (1, True),
    "admit_output_reserve": (0, True), "prefix_cache_tokens": (0, True), "prefix_block_tokens": (1, True),
    "cache_report": (0, True), "reasoning_tokens": (0, True), "reasoning_usage": (0, True),
    "vocab_size": (0, True), "advertise_max_model_len": (0, True), "stall_max_s": (0, False), "idle_timeout_s": (0, False),
    "network_delay_ms": (0, True), "drift_decode_pct_per_h": (0, True), "drift_prefill_pct_per_h": (0, True),
    "drift_kv_leak_tokens_per_h": (0, True),
}


def _coerce(key: str, value: object, typ: type) -> object:
    """Turn ``value`` (YAML scalar or CLI string) into ``typ`` or raise naming the key."""
    if typ is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise SimConfigError(key, value, "must be a string")
        return str(value)
    word = "an integer" if typ is int else "a number"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SimConfigError(key, value, f"must be {word}")
    try:
        number = float(value)
    except ValueError:
        raise SimConfigError(key, value, f"must be {word}") from None
    if not math.isfinite(number) or (typ is int and not number.is_integer()):
        raise SimConfigError(key, value, f"must be {word}")
    return int(number) if typ is int else number


def default_text(key: str) -> str:
    """The default of a setting as an option takes it (``spec_accept`` comma-separated)."""
    f = FIELDS[key]
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    if key == "step_batch_ms":
        return ",".join(f"{b:g}:{ms:g}" for b, ms in value) or "none"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "none" if value == "" else str(value)


def set_value(cfg: SimConfig, key: str, value: object) -> None:
    """Set one field from YAML or a CLI string, coercing and range-checking it."""
    if key not in FIELDS:
        raise SimConfigError(key, value, "unknown simulator setting",
                             "known: " + ", ".join(sorted(FIELDS)))
    if key == "spec_accept":
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not value:
            raise SimConfigError(key, value, "must be a list of probabilities", "e.g. 0.2,0.3,0.5")
        value = [_coerce(key, v, float) for v in value]
    elif key == "step_batch_ms":
        value = _knots(key, value)
    elif key == "faults":
        if not isinstance(value, dict):
            raise SimConfigError(key, value, "must be a mapping kind -> rate", "e.g. {http_500: 0.01}")
        for kind, rate in value.items():
            set_fault(cfg, str(kind), rate)
        return
    else:
        typ = {"int": int, "float": float, "str": str}[FIELDS[key].type]
        value = _coerce(key, value, typ)
    setattr(cfg, key, value)


def _knots(key: str, value: object) -> list[list[float]]:
    """[[batch, ms], ...] from YAML pairs or a CLI ``1:6.1,2:12.2`` (``none``: no knots); batches
    ascending and > 0, times > 0."""
    fix = "batch:ms pairs with batches ascending, e.g. 1:6.1,2:12.2,4:14.3 (none: step_base_ms + step_per_seq_ms x batch)"
    if isinstance(value, str):
        if value.strip().lower() in ("", "none"):
            return []
        value = [v.split(":") for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, list | tuple) and len(v) == 2 for v in value):
        raise SimConfigError(key, value, "must be a list of batch:ms pairs", fix)
    knots = [[_coerce(key, b, float), _coerce(key, ms, float)] for b, ms in value]
    if any(b <= 0 or ms <= 0 for b, ms in knots) or any(a[0] >= b[0] for a, b in itertools.pairwise(knots)):
        raise SimConfigError(key, value, "needs batches > 0 in ascending order and times > 0 ms", fix)
    return knots


def set_fault(cfg: SimConfig, kind: str, rate: object) -> None:
    if kind not in FAULT_KINDS:
        raise SimConfigError(f"faults.{kind}", rate, "unknown fault kind", "known: " + ", ".join(FAULT_KINDS))
    cfg.faults[kind] = _coerce(f"faults.{kind}", rate, float)


def required_header(cfg: SimConfig) -> tuple[str, str] | None:
    """``require_header`` as (lower-case name, value), or None."""
    if not cfg.require_header.strip():
        return None
    name, _, value = cfg.require_header.partition(":")
    return name.strip().lower(), value.strip()


def validate(cfg: SimConfig) -> SimConfig:
    """Range and cross-field checks; returns ``cfg``."""
    for key, choices in _CHOICES.items():
        if getattr(cfg, key) not in choices:
            raise SimConfigError(key, getattr(cfg, key), "must be one of " + "|".join(choices))
    for key, (low, inclusive) in _MIN.items():
        v = getattr(cfg, key)
        if v < low or (v == low and not inclusive):
            raise SimConfigError(key, v, f"must be {'>=' if inclusive else '>'} {low}")
    for key in ("eos_prob",):
        if not 0 <= cfg.eos_prob <= 1:
            raise SimConfigError(key, cfg.eos_prob, "must be a probability in [0, 1]")
    if any(p < 0 for p in cfg.spec_accept) or abs(sum(cfg.spec_accept) - 1) > 1e-6:
        raise SimConfigError("spec_accept", cfg.spec_accept, "must be probabilities >= 0 summing to 1",
                             "entry i is P(i + 1 tokens accepted per step), e.g. 0.2,0.3,0.5")
    for kind, rate in cfg.faults.items():
        if not 0 <= rate <= 1:
            raise SimConfigError(f"faults.{kind}", rate, "must be a probability in [0, 1]")
    if sum(cfg.faults.values()) > 1 + 1e-9:
        raise SimConfigError("faults", cfg.faults, "rates must sum to <= 1 (one fault per request at most)")
    for key in ("drift_decode_pct_per_h", "drift_prefill_pct_per_h"):
        if cfg.timing == "engine" and getattr(cfg, key):
            raise SimConfigError(key, getattr(cfg, key), "is a fixed timing setting (the engine model does "
                                 "not drift)", "use --timing fixed, or drift_kv_leak_tokens_per_h")
    if cfg.timing == "engine" and cfg.max_model_len + cfg.block_size > cfg.kv_tokens:
        raise SimConfigError("max_model_len", cfg.max_model_len,
                             f"must leave room in the KV cache (kv_tokens={cfg.kv_tokens})",
                             "lower max_model_len or raise kv_tokens")
    if cfg.require_header.strip() and not cfg.require_header.partition(":")[0].strip():
        raise SimConfigError("require_header", cfg.require_header, "must be 'Name: value'", "e.g. X-Api-Key: abc")
    return cfg


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_summary(name: str) -> str:
    """The first comment line of a bundled preset (what it models)."""
    for line in preset_path(name).read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def preset_path(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name)
    else:
        path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(preset_names())
        raise SimConfigError("preset", name, "no such preset or file", f"known presets: {known}")
    return path


def load(preset: str | None, overrides: dict[str, object] | None = None) -> SimConfig:
    """Defaults, then the preset's keys, then ``overrides`` (already named by field); validated."""
    cfg = SimConfig()
    if preset:
        path = preset_path(preset)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise SimConfigError("preset", str(path), f"is not valid YAML ({exc})".replace("\n", " ")) from None
        if not isinstance(data, dict):
            raise SimConfigError("preset", str(path), "must be a YAML mapping of settings")
        for key, value in data.items():
            set_value(cfg, str(key), value)
    for key, value in (overrides or {}).items():
        set_value(cfg, key, value)
    return validate(cfg)
