"""A mix of models: ``--model a=0.7,b=0.3`` and each request's model drawn by weight. Pure: no I/O,
no clock; seeded.

``parse_model(key, value)``: the scenario's ``model`` value -> None (discover the first id), one
name (exactly as before a mix existed), or a ``ModelMix``. A mix is written ``name=weight`` pairs
joined by commas, or as a mapping {name: weight}; weights are relative (0.7/0.3 and 7/3 are the same
mix). ``ModelDraw`` draws one sender's models: P(name) = weight / sum(weights), from a generator
seeded by the sender's key (prompt.seed, process, user), like its prompts, so the same seed and
processes send the same models in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from loadgen.errors import ConfigError

_EXAMPLE = "e.g. model: {base: 0.7, my-lora: 0.3} or --model base=0.7,my-lora=0.3"


@dataclass(frozen=True)
class ModelMix:
    """Model names (as GET /v1/models lists them) and their relative weights, in the order given."""

    names: tuple[str, ...]
    weights: tuple[float, ...]

    @property
    def shares(self) -> tuple[float, ...]:
        """Each name's probability: weight / sum(weights)."""
        total = sum(self.weights)
        return tuple(w / total for w in self.weights)

    def to_mapping(self) -> dict[str, float]:
        """{name: weight}: the scenario's ``model`` mapping (``Scenario.to_dict``)."""
        return dict(zip(self.names, self.weights, strict=True))

    def text(self) -> str:
        """``a=0.7,b=0.3``: the ``--model`` form."""
        return ",".join(f"{n}={w:g}" for n, w in zip(self.names, self.weights, strict=True))


def _weight(key: str, name: str, raw: object, given: object) -> float:
    """``raw``, the weight of ``name`` in ``given`` (the whole value, shown in an error), > 0."""
    fix = f"give {name!r} a weight > 0, {_EXAMPLE}"
    weight = raw
    if isinstance(raw, str):
        try:
            weight = float(raw)
        except ValueError:
            raise ConfigError(key, given, f"the weight of {name!r} must be a number", fix) from None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise ConfigError(key, given, f"the weight of {name!r} must be a number", fix)
    if not math.isfinite(weight) or weight <= 0:
        raise ConfigError(key, given, f"the weight of {name!r} must be a number > 0", fix)
    return float(weight)


def _pairs_of_text(key: str, value: str) -> list[tuple[str, object]]:
    pairs = []
    for part in value.split(","):
        name, eq, weight = (s.strip() for s in part.partition("="))
        if not name:
            raise ConfigError(key, value, "has an empty model name", f"write name=weight pairs, {_EXAMPLE}")
        if not eq or not weight:
            raise ConfigError(key, value, f"the model {name!r} has no weight",
                              f"give every model of a mix a weight, e.g. {name}=0.3")
        pairs.append((name, weight))
    return pairs


def parse_model(key: str, value: object) -> str | ModelMix | None:
    """None, one model name, or a mix (module docstring). Raises ConfigError naming the value and
    the fix: a weight missing, not a number or not > 0, a name given twice."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        pairs = [(str(k), v) for k, v in value.items()]
        if not pairs:
            raise ConfigError(key, value, "is an empty mix", f"name at least one model, {_EXAMPLE}")
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ConfigError(key, value, "must not be empty", "name a model id from GET /v1/models, or use null")
        if "=" not in text and "," not in text:
            return text  # one model: as before a mix existed
        pairs = _pairs_of_text(key, text)
    else:
        raise ConfigError(key, value, f"must be a model name or a mix, not a {type(value).__name__}", _EXAMPLE)
    names = [name for name, _ in pairs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(key, value, f"names the model {name!r} twice",
                              "give each model once, with its whole weight")
    weights = tuple(_weight(key, name, raw, value) for name, raw in pairs)
    return ModelMix(tuple(names), weights)


class ModelDraw:
    """One sender's models: ``next()`` draws a name, P(name) = its share of the mix. Seeded by
    ``seed_key`` (the sender's prompt key), a generator of its own (not the prompts')."""

    SALT = 0x6D6F64  # "mod": keeps this stream apart from the prompt and length generators

    def __init__(self, mix: ModelMix, seed_key: tuple[int, ...]):
        self.mix = mix
        self._cumulative = np.cumsum(mix.shares)
        self._rng = np.random.default_rng([self.SALT, *(int(x) & 0xFFFFFFFF for x in seed_key)])

    def next(self) -> str:
        i = int(np.searchsorted(self._cumulative, self._rng.random() * self._cumulative[-1], side="right"))
        return self.mix.names[min(i, len(self.mix.names) - 1)]
