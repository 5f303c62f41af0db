"""Several replicas (loadgen.wire.replicas): names, the two layouts, bad input, the pick policies,
and a router's header naming the engine."""

from __future__ import annotations

import argparse

import pytest

from loadgen.config import ConfigError
from loadgen.config.build import build_scenario
from loadgen.config.options import register_options, repeatable_host, scenario_from_options
from loadgen.wire.replicas import UNATTRIBUTED, Picker, Targets, engine_root, replica_name, upstream_name

HOSTS = ["http://127.0.0.1:8001", "http://127.0.0.1:8002/v1", "http://10.0.0.3:8000/"]


def test_names_and_roots():
    assert replica_name("http://10.0.0.5:8000") == "10.0.0.5:8000"
    assert replica_name("http://gw:80/serving/a") == "gw:80/serving/a"
    for given in ("http://e:8000", "http://e:8000/", "http://e:8000/metrics", "http://e:8000/get_server_info",
                  "http://e:8000/v1"):
        assert engine_root(given) == "http://e:8000", given


def test_hosts_spread_by_the_client():
    targets = Targets(build_scenario({"hosts": HOSTS, "replicas": {"policy": "least_inflight"}}))
    assert targets.names == ("127.0.0.1:8001", "127.0.0.1:8002", "10.0.0.3:8000")
    assert [r.root for r in targets.spread] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://10.0.0.3:8000"]
    assert targets.per_replica and targets.watched == targets.spread and targets.upstream_header is None
    assert targets.pick() == (0, "127.0.0.1:8001") and targets.root(0, "x") == "http://127.0.0.1:8001"


def test_one_host_is_inert():
    targets = Targets(build_scenario({}))
    assert targets.pick() == (None, None) and targets.root(None, "http://h:1") == "http://h:1"
    assert not targets.per_replica and targets.watched == () and targets.served_by("a:1") is None


def test_engines_behind_a_router():
    sc = build_scenario({"replicas": {"metrics": ["http://e1:8000/metrics", "http://e2:8000"],
                                      "upstream_header": "X-Upstream-Addr"}})
    targets = Targets(sc)
    assert targets.names == ("e1:8000", "e2:8000") and targets.spread == () and targets.pick() == (None, None)
    assert targets.per_replica and targets.served_by("e2:8000") == "e2:8000"
    assert targets.served_by(None) == UNATTRIBUTED and targets.served_by("e9:1") == UNATTRIBUTED


def test_a_retried_upstream_names_the_last_engine():
    assert upstream_name("e1:8000, e2:8000", ("e1:8000", "e2:8000")) == "e2:8000"
    assert upstream_name("e7:1", ()) == "e7:1"  # no engines listed: the header's value names it


@pytest.mark.parametrize("doc, key, says", [
    ({"hosts": ["http://a:1", "http://a:1/v1"]}, "hosts", "names the replica a:1 twice"),
    ({"hosts": ["http://a:1", "http://b:1"], "replicas": {"metrics": ["http://c:1"]}}, "replicas.metrics",
     "--host was given 2 times"),
])
def test_bad_layouts_name_the_value_and_the_fix(doc, key, says):
    with pytest.raises(ConfigError) as err:
        Targets(build_scenario(doc))
    assert err.value.key.startswith(key) and says in str(err.value)


@pytest.mark.parametrize("doc, key", [
    ({"hosts": "http://a:1"}, "hosts"),
    ({"hosts": ["a:1"]}, "hosts[0]"),
    ({"replicas": {"policy": "random"}}, "replicas.policy"),
    ({"replicas": {"share_ratio_max": 1}}, "replicas.share_ratio_max"),
])
def test_bad_values_are_config_errors(doc, key):
    with pytest.raises(ConfigError) as err:
        build_scenario(doc)
    assert err.value.key == key


def test_round_robin_cycles():
    picker = Picker(3, "round_robin")
    assert [picker.pick() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_inflight_sends_to_the_emptiest_and_never_past_the_even_share():
    picker = Picker(3, "least_inflight")
    assert [picker.pick() for _ in range(3)] == [0, 1, 2]
    picker.done(1)  # replica 1 finished one: it is the emptiest
    assert picker.pick() == 1
    for _ in range(5):  # 8 in flight over 3: no replica above ceil(8 / 3) = 3
        picker.pick()
    assert sorted(picker.inflight) == [2, 3, 3]
    # a slow replica (0) never finishes: the others take the new requests
    for _ in range(6):
        picker.done(1)
        picker.done(2)
        picker.pick()
        picker.pick()
    assert picker.inflight[0] == 3 >= max(picker.inflight[1:])


def test_host_repeated_on_the_command_line():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host")
    register_options(parser)
    repeatable_host(parser)
    opts = parser.parse_args(["--host", HOSTS[0], "--host", HOSTS[1], "--replica-policy", "least_inflight",
                              "--replica-metrics", "http://e:1/metrics"])
    assert opts.host == HOSTS[0] and opts.hosts == HOSTS[:2]
    sc = scenario_from_options(opts)
    assert sc.hosts == tuple(HOSTS[:2]) and sc.replicas.policy == "least_inflight"
    assert sc.replicas.metrics == ("http://e:1/metrics",)
    one = parser.parse_args(["--host", HOSTS[0]])
    assert one.hosts == [HOSTS[0]] and scenario_from_options(one).hosts == ()
