"""Open-loop scenario keys: rate lists, the geometric form, the flags, and their one-line errors."""

from __future__ import annotations

import argparse

import pytest

from loadgen.config import ConfigError, build_scenario, register_options, scenario_from_options
from loadgen.config.schema import ARRIVALS
from loadgen.workload import arrivals


def opts(*argv):
    parser = argparse.ArgumentParser()
    register_options(parser)
    return parser.parse_args(list(argv))


def test_closed_loop_by_default_and_the_vocabulary_matches_arrivals():
    sc = build_scenario({})
    assert not sc.open_loop and sc.loads() == sc.concurrencies()
    assert ARRIVALS == arrivals.ARRIVALS


def test_rate_list_and_geometric_form():
    assert build_scenario({"rate": {"list": [0.5, 1, 4]}}).loads() == [0.5, 1.0, 4.0]
    sc = build_scenario({"rate": {"start": 1, "max": 10, "factor": 3}})
    assert sc.open_loop and sc.loads() == [1, 3, 9, 10]
    assert build_scenario({"rate": {"start": 2, "max": 16}}).loads() == [2, 4, 8, 16]


def test_flags_set_the_rate_keys():
    sc = scenario_from_options(opts("--rates", "1,2.5,8", "--arrival", "gamma", "--burstiness", "0.5",
                                    "--arrival-seed", "7", "--max-inflight", "64"))
    r = sc.rate
    assert sc.loads() == [1.0, 2.5, 8.0] and (r.arrival, r.burstiness, r.seed, r.max_inflight) == (
        "gamma", 0.5, 7, 64)
    sc = scenario_from_options(opts("--rate-start", "1", "--rate-factor", "4", "--rate-max", "64"))
    assert sc.loads() == [1, 4, 16, 64]


@pytest.mark.parametrize("doc,key,words", [
    ({"rate": {"list": [2, 1]}}, "rate.list", "strictly increasing"),
    ({"rate": {"list": [0, 1]}}, "rate.list[0]", "> 0"),
    ({"rate": {"start": 1}}, "rate.start", "needs both"),
    ({"rate": {"start": 4, "max": 2}}, "rate.max", ">= rate.start"),
    ({"rate": {"start": 1, "max": 2, "list": [1]}}, "rate.start", "cannot be combined"),
    ({"rate": {"arrival": "uniform"}}, "rate.arrival", "must be one of"),
    ({"rate": {"burstiness": 0}}, "rate.burstiness", "> 0"),
])
def test_mistakes_name_the_key(doc, key, words):
    with pytest.raises(ConfigError) as err:
        build_scenario(doc)
    assert err.value.key == key and words in str(err.value)


def test_bad_rates_flag_names_the_flag():
    with pytest.raises(ConfigError, match=r"rate.list \(from --rates\).*comma-separated"):
        scenario_from_options(opts("--rates", "1,x"))
