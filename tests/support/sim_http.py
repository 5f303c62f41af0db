"""Reading the simulator's answers in tests: content chunk times, /metrics samples."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from tests.support.raw_client import request

COMPLETION = {"prompt": [1, 2, 3, 4, 5], "max_tokens": 100, "ignore_eos": True, "stream": True}


def content_times(resp) -> list[float]:
    """Arrival time of every content chunk (completions: choices[0].text non-empty)."""
    out = []
    for t, payload in resp.events:
        if payload == b"[DONE]":
            continue
        ev = json.loads(payload)
        if ev.get("choices") and ev["choices"][0].get("text"):
            out.append(t)
    return out


def metrics(url: str) -> dict[str, list]:
    resp = request(url, "GET", "/metrics")
    assert resp.status == 200
    return {f.name: f.samples for f in text_string_to_metric_families(resp.body.decode())}


def value(fams: dict, family: str, sample: str | None = None, **labels) -> float:
    for s in fams[family]:
        if s.name == (sample or family) and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family, sample, labels))
