"""Bad configuration and options through the real `locust -f locustfile.py` command line (issue 7).

Each bad input must end the process with exit code 2 and exactly one stderr line that names the
key (option or scenario key), the bad value and a fix, with no traceback. tests/unit/config/test_config.py
checks the messages at the library level; this table checks what a user really sees. Nothing
listens on the --host: every case must be refused before any connection is tried. The ~1.3 s
locust start-ups run four at a time.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from loadgen.errors import EXIT_CONFIG
from tests.support.runlocust import ROOT, locust_cmd

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HOST = "http://127.0.0.1:9"  # discard port: nothing listens; a case that got that far would exit 4

# (id, extra args, scenario file text or None, key in the line, value in the line, fix in the line)
# "{file}" in an arg is replaced by the scenario file's path.
CASES = [
    ("stages-decreasing", ["--stages", "4,1"], None, "stages.list (from --stages)", "[4, 1]", "write [1, 4]"),
    ("repeat-under-locust", ["--repeat", "3"], None, "--repeat", "'3'", "run llm-loadgen --repeat N"),
    ("stages-not-numbers", ["--stages", "1,x"], None, "stages.list (from --stages)", "'1,x'", "e.g. --stages"),
    ("stages-zero", ["--stages", "0,1"], None, "stages.list[0] (from --stages)", "got 0", "e.g. [1, 4, 16, 32]"),
    ("input-tokens-text", ["--input-tokens", "abc"], None, "input_tokens (from --input-tokens)", "'abc'", "e.g. 1000"),
    ("input-tokens-1e3", ["--input-tokens", "1e3"], None, "input_tokens (from --input-tokens)", "'1e3'",
     "plain digits"),
    ("input-tokens-negative", ["--input-tokens", "-5"], None, "input_tokens (from --input-tokens)", "-5", "e.g. 1000"),
    ("output-tokens-zero", ["--output-tokens", "0"], None, "output_tokens (from --output-tokens)", "got 0", "e.g. 1000"),
    ("duration-negative", ["--stage-duration", "-1"], None, "stages.duration_s (from --stage-duration)",
     "-1", "e.g. 60"),
    ("exporter-port-range", ["--exporter-port", "99999"], None, "exporter.port (from --exporter-port)",
     "99999", "0 to turn the exporter off"),
    ("api-key-env-not-a-name", ["--api-key-env", "sk-secret-value"], None, "api_key_env (from --api-key-env)",
     "<hidden", "OPENAI_API_KEY"),
    ("guard-action-choice", ["--guard-action", "stop"], None, "--guard-action", "'stop'",
     "abort, clamp, warn"),
    ("endpoint-choice", ["--endpoint", "embeddings"], None, "--endpoint", "'embeddings'", "completions, chat"),
    ("endpoint-path", ["--endpoint", "/v1/chat/completions"], None, "endpoint (from --endpoint)",
     "'/v1/chat/completions'", "did you mean 'chat'?"),
    ("set-unknown-key", ["--set", "stages.facter=3"], None, "stages.facter (from --set)", "3",
     "did you mean --set stages.factor=3?"),
    ("set-no-equals", ["--set", "nokey"], None, "--set", "'nokey'", "KEY=VALUE"),
    ("set-bad-yaml", ["--set", "stages.list=[1,"], None, "stages.list (from --set)", "'[1,'", "quote text values"),
    ("prefix-not-below-input", ["--input-tokens", "64", "--shared-prefix-tokens", "64"], None,
     "prompt.shared_prefix_tokens", "64", "use at most 63"),
    ("no-host", ["--host", ""], None, "--host", "got nothing", "--host http://"),
    ("host-not-a-url", ["--host", "localhost:8000"], None, "--host", "'localhost:8000'", "--host http://"),
    ("file-missing", ["--scenario", "/nonexistent/x.yaml"], None, "scenario (from --scenario)",
     "'/nonexistent/x.yaml'", "or a bundled scenario's name (chat, default, demo, smoke, soak)"),
    ("file-is-a-directory", ["--scenario", "{dir}"], None, "scenario (from --scenario)", "{dir}",
     "pass a file"),
    ("file-unreadable", ["--scenario", "{file}/x.yaml"], "input_tokens: 5\n", "scenario (from --scenario)",
     "x.yaml", "check the path"),
    ("file-not-utf8", ["--scenario", "{file}"], b"name: caf\xe9\n", "scenario (from --scenario)", "{file}",
     "save it as UTF-8"),
    ("file-invalid-yaml", ["--scenario", "{file}"], "stages:\n  list: [1, 2\n", "{file}:", "invalid YAML",
     "fix the syntax"),
    ("file-tab-indent", ["--scenario", "{file}"], "stages:\n\tlist: [1, 2]\n", "{file}:", "\\t",
     "indent with spaces"),
    ("file-duplicate-key", ["--scenario", "{file}"], "input_tokens: 5\ninput_tokens: 6\n", "{file}:2",
     "'input_tokens'", "YAML would silently keep the last"),
    ("file-unknown-key", ["--scenario", "{file}"], "input_token: 64\n", "input_token", "64",
     "did you mean input_tokens?"),
    ("file-wrong-type", ["--scenario", "{file}"], "stages:\n  factor: 0.5\n", "stages.factor", "0.5",
     "use 2 to double"),
    ("file-empty", ["--scenario", "{file}"], "# nothing\n", "scenario (from --scenario)", "{file}",
     "start from config/default.yaml"),
    ("file-reserved-body-key", ["--scenario", "{file}"], "request:\n  extra_body:\n    max_tokens: 5\n",
     "request.extra_body.max_tokens", "5", "set output_tokens instead"),
    ("slo-ttft-below-1ms", ["--slo", "ttft_s=0.0005"], None, "slo.ttft_s (from --slo)", "0.0005",
     "1 ms at least"),
    ("slo-attainment-above-1", ["--slo", "tpot_s=0.05,attainment=1.2"], None, "slo.attainment (from --slo)",
     "1.2", "e.g. 0.99"),
    ("slo-unknown-objective", ["--slo", "ttft=2"], None, "slo.ttft (from --slo)", "2",
     "did you mean --slo ttft_s=2?"),
    ("slo-search-without-objective", ["--slo-search"], None, "slo.search (from --slo-search)", "True",
     "--slo tpot_s=0.05"),
    ("file-slo-attainment-zero", ["--scenario", "{file}"], "slo:\n  tpot_s: 0.05\n  attainment: 0\n",
     "slo.attainment", "got 0", "e.g. 0.99"),
]


def _prepare(tmp_path, case) -> tuple[list[str], dict]:
    name, args, text, key, value, fix = case
    f = tmp_path / f"{name}.yaml"
    if text is not None:
        f.write_bytes(text if isinstance(text, bytes) else text.encode())
    subst = {"{file}": str(f), "{dir}": str(tmp_path)}

    def fill(s: str) -> str:
        for k, v in subst.items():
            s = s.replace(k, v)
        return s

    host = HOST
    if args[:1] == ["--host"]:
        host, args = args[1], args[2:]
    cmd = locust_cmd(host, "--results-dir", str(tmp_path / f"res-{name}"), *map(fill, args))
    if not host:  # no --host at all
        i = cmd.index("--host")
        del cmd[i:i + 2]
    return cmd, {"key": fill(key), "value": fill(value), "fix": fill(fix)}


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OPENAI_API_KEY": ""})


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("badinput")
    prepared = [_prepare(tmp, case) for case in CASES]
    with ThreadPoolExecutor(4) as pool:
        procs = list(pool.map(_run, [cmd for cmd, _ in prepared]))
    return {case[0]: (proc, want) for case, (_, want), proc in zip(CASES, prepared, procs, strict=True)}


def test_the_table_has_at_least_20_distinct_bad_inputs():
    assert len({c[0] for c in CASES}) == len(CASES) >= 20


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line_naming_key_value_and_fix(outcomes, name):
    proc, want = outcomes[name]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == EXIT_CONFIG, proc.stderr[-2000:]
    assert len(lines) == 1, proc.stderr[-2000:]
    (line,) = lines
    assert want["key"] in line and want["value"] in line and want["fix"] in line, line
    assert "Traceback" not in proc.stderr and proc.stdout.strip() == ""
    assert "sk-secret-value" not in proc.stderr  # a key passed by mistake is never echoed
