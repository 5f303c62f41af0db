"""The simulator serving several models (--served-models): listed by /v1/models, each answered under
its own name, an unknown one refused 404 as vLLM refuses it."""

from __future__ import annotations

import json

import pytest

from loadgen.sim.launch import running_sim
from tests.support.raw_client import request

pytestmark = pytest.mark.integration

ASK = {"prompt": [1, 2, 3], "max_tokens": 4, "ignore_eos": True, "stream": True}


def test_served_models_listed_answered_and_unknown_refused():
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "1", "--served-models", "base,lora-a") as sim:
        listed = json.loads(request(sim.url, "GET", "/v1/models").body)
        assert [card["id"] for card in listed["data"]] == ["base", "lora-a"]
        for name in ("base", "lora-a"):
            resp = request(sim.url, "POST", "/v1/completions", {**ASK, "model": name})
            assert resp.status == 200 and resp.done
            first = json.loads(resp.events[0][1])
            assert first["model"] == name
        resp = request(sim.url, "POST", "/v1/completions", {**ASK, "model": "nope"})
        assert resp.status == 404
        assert json.loads(resp.body) == {"error": {"message": "The model `nope` does not exist.",
                                                   "type": "NotFoundError", "param": None, "code": 404}}


def test_without_served_models_any_model_is_served():
    with running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "1") as sim:
        listed = json.loads(request(sim.url, "GET", "/v1/models").body)
        assert [card["id"] for card in listed["data"]] == ["llmsim-fixed"]  # the preset's model
        resp = request(sim.url, "POST", "/v1/completions", {**ASK, "model": "anything"})
        assert resp.status == 200 and resp.done
