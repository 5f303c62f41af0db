"""Per-request workload (pure): lengths drawn per user, prompts of exactly those lengths, datasets
in order and cycling, the text calibration's line, the KV guard's figure for mixes."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.config import ConfigError, build_scenario
from loadgen.workload.asks import DatasetCursor, PromptMaker, TextFit, Workload
from loadgen.workload.dataset import DatasetRequest
from loadgen.workload.lengths import LengthDist
from loadgen.workload.mix import Z_BURST, from_dists, from_pairs, scenario_mix

RANGE = (1000, 30000)
UNIFORM = LengthDist("uniform", min=50, max=500)
FIXED_OUT = LengthDist("fixed", value=16)


def ids_workload(seed_key=(0, 0, 1), cursor=None, inputs=UNIFORM, outputs=FIXED_OUT) -> Workload:
    return Workload(PromptMaker("token_ids", RANGE, seed_key), inputs, outputs, seed_key, cursor)


def test_token_id_prompts_have_exactly_each_drawn_length():
    w = ids_workload()
    asks = [w.next() for _ in range(300)]
    assert all(len(a.prompt) == a.input_tokens for a in asks)
    lengths = np.array([a.input_tokens for a in asks])
    assert lengths.min() >= 50 and lengths.max() <= 500 and lengths.std() > 80  # really varied
    assert all(a.output_tokens == 16 for a in asks)


def test_draws_are_seeded_per_user():
    def first(key, n=20):
        w = ids_workload(key)
        return [(a.input_tokens, a.prompt[:3].tolist()) for a in (w.next() for _ in range(n))]

    assert first((0, 0, 1)) == first((0, 0, 1))  # same seed, process and user: the same requests
    assert first((0, 0, 1)) != first((0, 0, 2))


def test_sampled_lengths_mean_and_spread_through_the_workload():
    w = ids_workload(inputs=LengthDist("normal", mean=800, std=200, min=1, max=4000),
                     outputs=LengthDist("lognormal", mean=300, std=150, min=1))
    asks = [w.next() for _ in range(4000)]
    ins = np.array([a.input_tokens for a in asks])
    outs = np.array([a.output_tokens for a in asks])
    assert ins.mean() == pytest.approx(800, rel=0.02) and ins.std() == pytest.approx(200, rel=0.05)
    assert outs.mean() == pytest.approx(300, rel=0.03) and outs.std() == pytest.approx(150, rel=0.1)


def test_text_fit_solves_the_line_and_keeps_exact_counts():
    fit = TextFit.from_two(64, 74, 512, 522)  # tokens = words + 10 (a chat template's constant)
    assert (fit.a, fit.b) == (1.0, 10.0)
    assert fit.words(110) == 100 and fit.words(5) == 1
    assert TextFit(1.0, 10.0, {1000: 977}).words(1000) == 977  # the fixed case stays exact
    chat = PromptMaker("chat", RANGE, (0, 1), fit=fit)
    (msg,), expected = chat.make(110)
    assert msg["role"] == "user" and len(msg["content"].split()) == 100 and expected == 110
    with pytest.raises(ValueError, match="TextFit"):
        PromptMaker("text", RANGE, (0, 1))


def test_dataset_in_order_cycling_with_given_and_synthesized_prompts():
    lines = [DatasetRequest(1, 40, 8), DatasetRequest(2, None, None, prompt="hello there"),
             DatasetRequest(3, None, 5, prompt=(5, 6, 7)), DatasetRequest(4, 30, None, hash_ids=(1, 2))]
    w = ids_workload(cursor=DatasetCursor(lines))
    asks = [w.next() for _ in range(8)]
    assert [a.line for a in asks] == [1, 2, 3, 4, 1, 2, 3, 4]
    assert (len(asks[0].prompt), asks[0].input_tokens, asks[0].output_tokens) == (40, 40, 8)
    assert (asks[1].prompt, asks[1].input_tokens, asks[1].output_tokens) == ("hello there", None, 16)
    assert (asks[2].prompt.tolist(), asks[2].input_tokens, asks[2].output_tokens) == ([5, 6, 7], 3, 5)
    assert len(asks[3].prompt) == 30 and asks[3].input_tokens == 30


def test_hash_ids_share_token_blocks_across_users():
    a = DatasetRequest(1, 40, 4, hash_ids=(7, 8))
    b = DatasetRequest(2, 40, 4, hash_ids=(7, 9))
    pa = Workload(PromptMaker("token_ids", RANGE, (0, 0, 1)), UNIFORM, FIXED_OUT, (0, 0, 1), DatasetCursor([a]),
                  block_tokens=16).next().prompt.tolist()
    pb = Workload(PromptMaker("token_ids", RANGE, (0, 0, 2)), UNIFORM, FIXED_OUT, (0, 0, 2), DatasetCursor([b]),
                  block_tokens=16).next().prompt.tolist()
    assert pa[:16] == pb[:16] and pa[16:32] != pb[16:32]


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_hash_ids_share_word_blocks_in_text_prompts(kind):
    """Text prompts (chat, or completions on a server that refuses token IDs): block i is
    round(block_tokens / a) one-token words drawn from hash_ids[i] alone; the whole prompt has the
    calibrated word count. Here a = 0.5 token per word: 16-token blocks are 32 words."""
    fit = TextFit(0.5, 10.0)  # tokens = 0.5 x words + 10: 40 tokens -> 60 words
    a = DatasetRequest(1, 40, 4, hash_ids=(7, 8))
    b = DatasetRequest(2, 40, 4, hash_ids=(7, 9))

    def words(line, user):
        w = Workload(PromptMaker(kind, RANGE, (0, 0, user), fit=fit), UNIFORM, FIXED_OUT, (0, 0, user),
                     DatasetCursor([line]), block_tokens=16)
        ask = w.next()
        text = ask.prompt[0]["content"] if kind == "chat" else ask.prompt
        assert ask.input_tokens == 40
        return text.split()

    wa, wb = words(a, 1), words(b, 2)
    assert len(wa) == len(wb) == 60
    assert wa[:32] == wb[:32] and wa[32:60] != wb[32:60]
    assert words(a, 3) == wa  # the blocks cover every word: no user-seeded tail


def test_chat_dataset_text_becomes_a_user_message_and_messages_pass_through():
    fit = TextFit(1.0, 0.0)
    msgs = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
    cursor = DatasetCursor([DatasetRequest(1, None, 3, prompt="hi there"), DatasetRequest(2, None, 3, messages=msgs)])
    w = Workload(PromptMaker("chat", RANGE, (0,), fit=fit), UNIFORM, FIXED_OUT, (0,), cursor)
    assert w.next().prompt == [{"role": "user", "content": "hi there"}]
    assert w.next().prompt == [dict(m) for m in msgs]


def test_kv_figure_fixed_mean_and_bursts():
    fixed = from_dists(LengthDist("fixed", value=1000), LengthDist("fixed", value=1000))
    assert fixed.split(1) == (1000, 1000) and fixed.split(512) == (1000, 1000)
    mix = from_pairs([(100, 100), (3900, 100)])  # mean 2100, std 1900, longest 4000
    assert mix.per_request(1) == 4000  # mu + z sigma > the longest: capped
    assert mix.per_request(10_000) == pytest.approx(2100 + Z_BURST * 1900 / 100)
    n_in, n_out = mix.split(10_000)
    assert n_in + n_out == int(np.ceil(mix.per_request(10_000))) and n_in > 10 * n_out
    assert from_pairs([(100, 100), (3900, 100)], turns=3).mean == pytest.approx(3 * 2100)


def test_scenario_mix_of_distributions_and_turns():
    sc = build_scenario({"input": {"dist": "uniform", "min": 100, "max": 300}, "output_tokens": 50,
                         "workload": {"turns": 2}})
    mix = scenario_mix(sc)
    assert mix.mean == pytest.approx(2 * (200 + 50), rel=0.01) and mix.longest == 2 * 350
    assert mix.per_request(1) > mix.per_request(100) > mix.mean


@pytest.mark.parametrize("doc,key", [
    ({"input": {"dist": "uniform", "min": 10}}, "input.max"),
    ({"output": {"dist": "normal", "mean": 300}}, "output.std"),
    ({"input": {"dist": "uniform", "min": 10, "max": 5}}, "input.max"),
    ({"input": {"dist": "poisson"}}, "input.dist"),
])
def test_bad_distributions_are_one_line_config_errors(doc, key):
    with pytest.raises(ConfigError) as err:
        build_scenario(doc)
    assert err.value.key == key and "\n" not in str(err.value)


def test_the_report_draws_the_length_mix_only_when_lengths_varied():
    from loadgen.report.plots import build_run_figures
    from loadgen.stats.records import RequestResult
    from loadgen.stats.stage_stats import StageStats

    e = np.empty(0)

    def stage(lengths):
        s = StageStats()
        for n_in, n_out in lengths:
            s.add_result(RequestResult(True, None, "", n_in, n_out, False, 0.1, 1.0, None, None, e, e, e, "length", 1),
                         n_in, n_out)
        return {"index": 0, "concurrency": 1, **s.row(1.0)}

    varied = stage([(100, 10), (3000, 10), (500, 200)])
    assert sum(varied["length_hist"]["input"]) == 3 and len(varied["length_hist"]["edges"]) == 36
    assert "lengths" in build_run_figures({"stages": [varied]})
    assert "lengths" not in build_run_figures({"stages": [stage([(100, 10)] * 3)]})
