"""What we send to a server, and how a refusal changes it (pure)."""

from __future__ import annotations

import orjson
import pytest

from loadgen.config.build import build_scenario
from loadgen.config.schema import default_document
from loadgen.wire.compat import (
    Compat,
    adapt,
    build_body,
    fit_range,
    initial,
    likely_fix,
    refused_token_id,
    vocabulary_search,
    with_vocabulary,
)
from loadgen.workload.prompts import TokenIdPrompts


def scenario(**over):
    doc = default_document()
    for k, v in over.items():
        doc[k] = v
    return build_scenario(doc)


def body(compat, **over):
    sc = scenario(**over)
    prompt = [1, 2, 3] if sc.endpoint == "completions" else [{"role": "user", "content": "hi"}]
    return orjson.loads(build_body(sc, "m", prompt, compat))


def test_default_body_forces_the_length():
    b = body(Compat())
    assert (b["max_tokens"], b["min_tokens"], b["ignore_eos"], b["stream"]) == (1000, 1000, True, True)
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["prompt"] == [1, 2, 3] and b["model"] == "m"


def test_a_token_id_array_is_written_as_a_json_list_of_integers():
    ids = TokenIdPrompts(5, (100, 200), (1, 2)).next()  # TokenIds: an int64 array, not a list
    raw = build_body(scenario(), "m", ids, Compat())
    assert orjson.loads(raw)["prompt"] == ids.tolist() and b'"prompt":[' in raw


def test_dropped_fields_are_gone_and_empty_stream_options_too():
    c = Compat(dropped_fields=("ignore_eos", "min_tokens", "continuous_usage_stats"))
    b = body(c)
    assert "ignore_eos" not in b and "min_tokens" not in b and b["stream_options"] == {"include_usage": True}
    assert not c.output_forced
    b = body(Compat(dropped_fields=("continuous_usage_stats", "stream_options")))
    assert "stream_options" not in b and b["ignore_eos"] is True


def test_initial_detection_and_vocabulary():
    assert initial("auto", "llamacpp", None, 8192, (1000, 30000)) == Compat(
        "llamacpp", "owned_by", token_id_range=(1000, 8192),
        adaptations=("token IDs drawn from [1000, 8192): the vocabulary has 8192 tokens",))
    assert initial("auto", None, "sglang", None, (1000, 30000)).server == "sglang"
    assert initial("auto", "someone", None, None, (1000, 30000)) == Compat("openai", "default")
    strict = initial("openai-strict", "vllm", "vllm", None, (1000, 30000))
    assert strict.prompt_kind == "text" and not strict.output_forced and strict.detected_by == "scenario"
    assert fit_range((1000, 30000), 512) == (128, 512) and fit_range((1000, 30000), 50000) == (1000, 30000)


def test_a_refusal_naming_fields_drops_exactly_those():
    b = body(Compat())
    msg = "Unexpected fields in the request: {'ignore_eos', 'min_tokens'}"
    c = adapt(Compat(), 422, msg, b)
    assert c.dropped_fields == ("ignore_eos", "min_tokens") and c.server == "openai-strict"
    assert c.detected_by == "probe" and "not sent: ignore_eos, min_tokens" in c.adaptations[0]
    # next refusal names another: it is added, the first ones stay dropped
    c2 = adapt(c, 400, "extra inputs are not permitted: stream_options.continuous_usage_stats", body(c))
    assert c2.dropped_fields == ("ignore_eos", "min_tokens", "continuous_usage_stats")


def test_token_id_refusals_switch_to_text_unless_already_fitted():
    b = body(Compat())
    for status, msg in ((400, "Prompt contains invalid tokens"), (400, "prompt: Input should be a valid string"),
                        (422, "Failed to deserialize the JSON body into the target type: prompt: data did not match "
                              "any variant of untagged enum StringOrArray at line 1 column 618")):  # sglang-router
        c = adapt(Compat(), status, msg, b)
        assert c.prompt_kind == "text" and "text prompts" in c.adaptations[-1]
    fitted = Compat("llamacpp", "owned_by", token_id_range=(1000, 8192))  # still refused: text keeps the intent
    assert adapt(fitted, 400, "Prompt contains invalid tokens", b).prompt_kind == "text"
    text = Compat(prompt_kind="text")
    assert adapt(text, 400, "Prompt contains invalid tokens", body(text) | {"prompt": "a b"}) is None


@pytest.mark.parametrize("status,msg", [(500, "Unexpected fields: ignore_eos"), (404, "ignore_eos"),
                                        (400, "The model `x` does not exist."), (400, "context length exceeded")])
def test_nothing_to_adapt(status, msg):
    assert adapt(Compat(), status, msg, body(Compat())) is None


def test_likely_fixes():
    assert "API key" in likely_fix(401, "", "/v1/completions", "m")
    assert "--model" in likely_fix(404, "The model `m` does not exist", "/v1/completions", "m")
    assert "--host" in likely_fix(404, "Not Found", "/v1/completions", "m")
    assert "--input-tokens" in likely_fix(400, "This model's maximum context length is 4096", "/p", "m")
    assert "request.compat" in likely_fix(400, "something else", "/p", "m")


def test_round_trip_for_the_phase_message():
    c = Compat("llamacpp", "owned_by", "text", (5, 9), ("min_tokens",), ("a", "b"))
    assert Compat.from_dict(orjson.loads(orjson.dumps(c.to_dict()))) == c
    assert "output length asked" in c.describe() and "min_tokens" in c.describe()


@pytest.mark.parametrize("thinking", [True, False])
def test_request_thinking_is_sent_as_the_chat_template_switch(thinking):
    b = body(Compat(), endpoint="chat", request={"thinking": thinking})
    assert b["chat_template_kwargs"] == {"enable_thinking": thinking}
    assert "chat_template_kwargs" not in body(Compat(), endpoint="chat")  # null: the server's default


def test_request_thinking_on_completions_is_refused():
    from loadgen.errors import ConfigError

    with pytest.raises(ConfigError, match="request.thinking.*chat only"):
        scenario(request={"thinking": False})


@pytest.mark.parametrize("n_vocab", [1001, 1002, 8194, 29385, 29386])
def test_the_vocabulary_search_finds_its_end_by_bisection(n_vocab):
    """A server that takes IDs below n_vocab: the search from a taken 1000 and a refused 29386 ends
    at n_vocab in ceil(log2(28386)) = 15 tries or fewer."""
    search, tries = vocabulary_search(1000, 29386), 0
    try:
        token_id = next(search)
        while True:
            tries += 1
            token_id = search.send(token_id < n_vocab)
    except StopIteration as end:
        assert end.value == min(n_vocab, 29386) and tries <= 15


def test_a_refusal_names_the_token_id_outside_the_vocabulary():
    assert refused_token_id("Token id 29386 is out of vocabulary") == 29386  # vLLM 0.32
    assert refused_token_id("Prompt contains invalid tokens") is None  # llama.cpp: no ID named
    assert refused_token_id("model 'x' not found (id 12)") is None
    fitted = with_vocabulary(Compat("vllm", "owned_by"), (1000, 30000), 29386, 8194, 15)
    assert fitted.token_id_range == (1000, 8194) and fitted.prompt_kind == "token_ids"
    assert "refused token ID 29386" in fitted.adaptations[-1] and "ends at 8194 (15 tries)" in fitted.adaptations[-1]
