"""``--header`` / ``request.headers`` (issue 36 item 1): syntax, the scenario, redaction, and what
the one HTTP client sends. The run against a gateway is tests/integration/test_headers_e2e.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loadgen.config import ConfigError, build_scenario, scenario_from_options
from loadgen.config.headers import is_credential, secrets
from loadgen.config.schema import default_document
from loadgen.run.runtime import Runtime
from loadgen.wire.client import StreamClient
from tests.integration.test_guard import serve


def options(*headers: str, **more):
    return SimpleNamespace(header=list(headers), **more)


def test_flags_give_the_scenarios_headers_and_a_file_mapping_is_laid_under_them():
    sc = scenario_from_options(options("X-Api-Key: abc", "X-Route:  a:b "))
    assert dict(sc.request.headers) == {"X-Api-Key": "abc", "X-Route": "a:b"}  # the first colon splits
    doc = default_document()
    doc["request"]["headers"] = {"X-Tenant": "t1", "x-route": "old"}
    sc = build_scenario(doc, {"request.headers.X-Route": "new"})
    assert dict(sc.request.headers) == {"X-Tenant": "t1", "X-Route": "new"}  # --header wins, any case
    with pytest.raises(TypeError):
        sc.request.headers["X"] = "y"  # shared by every request: read-only


@pytest.mark.parametrize(("given", "said"), [
    ("no-colon", "must be 'Name: value' with a colon, got 'no-colon'"),
    (": v", "needs a header name before the colon, got ': v'"),
    ("X Y: v", "is not a valid header name"),
    ("X-A: a\r\nEvil: b", "request.headers.X-A (from --header): must not contain a line break"),
    ("Content-Type: text/plain", "request.headers.Content-Type (from --header): is set by the client"),
])
def test_bad_syntax_is_a_config_error_naming_the_value_and_the_fix(given, said):
    with pytest.raises(ConfigError) as bad:
        scenario_from_options(options(given))
    assert said in str(bad.value) and bad.value.fix  # what, the value, and how to fix it


def test_a_secret_is_never_repeated_in_an_error():
    for given in (["Authorization Bearer sk-123"], ["X-Token: a\nb"], ["X-Key: sk-1", "x-key: sk-2"]):
        with pytest.raises(ConfigError) as bad:
            scenario_from_options(options(*given))
        assert "sk-" not in str(bad.value) and "a\\nb" not in str(bad.value) and "<hidden>" in str(bad.value)
    doc = default_document()
    doc["request"]["headers"] = {"X-Api-Key": ["sk-list"]}
    with pytest.raises(ConfigError) as bad:
        build_scenario(doc)
    assert "sk-list" not in str(bad.value) and "must be text" in str(bad.value)


def test_which_names_are_credentials():
    for name in ("Authorization", "authorization", "X-Api-Key", "X-AUTH-TOKEN", "x-client-secret", "Proxy-Authorization"):
        assert is_credential(name), name
    for name in ("X-Tenant", "X-Request-Id", "Accept", "X-Route"):
        assert not is_credential(name), name
    assert secrets({"X-Key": "ab", "X-Token": "abc", "X-Tenant": "t"}) == [("abc", "<header X-Token>"),
                                                                          ("ab", "<header X-Key>")]


def test_summary_scenario_hides_credential_values_and_logs_are_redacted():
    sc = scenario_from_options(options("X-Api-Key: sk-abc", "X-Tenant: t1"))
    assert sc.to_dict()["request"]["headers"] == {"X-Api-Key": "<hidden>", "X-Tenant": "t1"}
    assert build_scenario(default_document()).to_dict()["request"]["headers"] == {}
    rt = Runtime(SimpleNamespace(parsed_options=None, runner=None), sc)
    assert rt.redact("bad key sk-abc for t1") == "bad key <header X-Api-Key> for t1"


def test_relayed_options_rebuild_the_same_headers_on_a_worker():
    """Locust's master relays parsed options to workers as they are: a list for an append flag."""
    relayed = options(*["X-Api-Key: abc", "X-Tenant: t1"])
    assert dict(scenario_from_options(relayed).request.headers) == {"X-Api-Key": "abc", "X-Tenant": "t1"}


def test_the_client_sends_the_headers_on_every_call_and_they_win_over_the_key():
    routes = {"/v1/models": (200, {"data": [{"id": "m"}]})}
    with serve(routes) as (url, hits):
        client = StreamClient(url, api_key="env-key", headers={"authorization": "Bearer gw", "X-Tenant": "t"})
        try:
            client.get_json("/v1/models")
            client.get_text("/v1/models")
        finally:
            client.close()
    assert [auth for _, auth in hits] == ["Bearer gw", "Bearer gw"]


def test_a_url_password_is_hidden_in_what_outputs_show():
    from loadgen.config.headers import url_shown

    assert url_shown("http://ops:s3cret@10.0.0.7:9400/metrics") == "http://ops:<hidden>@10.0.0.7:9400/metrics"
    assert url_shown("https://ops@gpu:9400/metrics?x=1") == "https://ops@gpu:9400/metrics?x=1"  # no password
    assert url_shown("http://127.0.0.1:30000") == "http://127.0.0.1:30000"


def test_the_scenario_as_summary_json_shows_it_has_no_gpu_exporter_password():
    from loadgen.config import build_scenario

    sc = build_scenario({"gpu_metrics": ["http://ops:s3cret@node1:9400/metrics", "http://node2:9400/metrics"]})
    shown = sc.to_dict()["gpu_metrics"]
    assert shown == ["http://ops:<hidden>@node1:9400/metrics", "http://node2:9400/metrics"]
    assert "s3cret" not in str(sc.to_dict()) and sc.gpu_metrics[0].endswith("s3cret@node1:9400/metrics")
