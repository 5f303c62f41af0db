"""The llm-loadgen command without a server: its help and docs from the option table, the
vLLM/SGLang spellings, --label/--metadata, the presets, the subcommands that write files, and
every pointer to documentation in a message. (tests/integration/test_wheel.py runs the installed command.)"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen import cli, cli_help
from loadgen.config import ConfigError, build_scenario, bundled, register_options, scenario_from_options
from loadgen.config.options import _OPTIONS
from loadgen.config.run_tags import RunTags, tags_from_options, tags_text

ROOT = Path(__file__).resolve().parents[3]


def opts(*argv):
    parser = argparse.ArgumentParser()
    register_options(parser)
    return parser.parse_args(list(argv))


def registered_flags() -> list[str]:
    parser = argparse.ArgumentParser(add_help=False)
    register_options(parser)
    return [a.option_strings[0] for a in parser._actions]


# --- help and docs/cli.md ------------------------------------------------------------------------


def test_help_lists_every_registered_option_once_in_its_group():
    text = cli_help.format_help()
    flags = registered_flags()
    assert len(flags) == len(_OPTIONS) + 3  # the table, --scenario, --set and --repeat
    for flag in flags + [f for _, fs in cli_help.LOCUST_GROUPS for f in fs]:
        assert len(re.findall(rf"^  {re.escape(flag)}(?=[ ,]|$)", text, re.M)) == 1, flag
    groups = [title for title, _ in cli_help.all_options()]
    for wanted in ("load and stages", "workload", "guard (KV cache)", "SLO", "open loop (request rates)",
                   "output", "distributed (Locust)", "TLS and authentication", "web UI (Locust; llm-loadgen web)"):
        assert f"\n{wanted}:\n" in text and wanted in groups
    stages = text.split("\nload and stages:\n")[1].split("\n\n")[0]
    assert "--stages" in stages and "--max-concurrency" in stages and "--rates" not in stages


def test_help_shows_the_built_in_defaults_and_units():
    text = " ".join(cli_help.format_help(width=10_000).split())
    assert "--stage-duration SECONDS measured seconds per stage (default: 60) [stages.duration_s]" in text
    assert "--input-tokens TOKENS prompt length in tokens (default: 1000) [input_tokens]" in text
    assert "(default: 1,2,4,8,...,1024 (stages.start/factor/max)) [stages.list]" in text
    assert "--guard-action {abort,clamp,warn} what to do with a stage over KV capacity (default: abort)" in text
    assert "--web-host" in text and "(default: 127.0.0.1)" in text  # our loopback default, not Locust's
    # another spelling of a key shows no default of its own: --max-concurrency is one stage, not the sweep
    assert "one stage at this concurrency (same as --stages C) [stages.list]" in text


def test_an_option_outside_every_help_group_is_refused(monkeypatch):
    monkeypatch.setattr(cli_help, "GROUPS", cli_help.GROUPS[1:])  # no "scenario" group
    with pytest.raises(LookupError, match="--scenario sets scenario"):
        cli_help.our_options()


def test_docs_cli_md_is_generated_from_the_option_table():
    """Regenerate with: python -m loadgen.cli_help > docs/cli.md"""
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == cli_help.format_markdown(), (
        "docs/cli.md differs from the option table: run .venv/bin/python -m loadgen.cli_help > docs/cli.md")


def test_the_comparison_page_names_only_options_we_have():
    page = (ROOT / "docs" / "coming-from-vllm-sglang.md").read_text(encoding="utf-8")
    aliases = page.split("## Accepted as they are")[1].split("## Different meaning")[0]
    rows = [row for row in aliases.splitlines()[4:] if row.startswith("|")]
    ours = {cell for row in rows for cell in re.findall(r"--[a-z-]+", row.split("|")[2])}
    assert ours >= {"--max-concurrency", "--request-rate", "--random-input-len", "--seed", "--metadata", "--label"}
    assert ours <= set(registered_flags()), ours - set(registered_flags())


# --- vLLM / SGLang spellings -----------------------------------------------------------------------


def test_aliases_set_the_same_keys_as_our_options():
    assert scenario_from_options(opts("--max-concurrency", "8")).concurrencies() == [8]
    assert scenario_from_options(opts("--request-rate", "2.5")).loads() == [2.5]
    sc = scenario_from_options(opts("--random-input-len", "100", "--random-output-len", "7"))
    assert (sc.input_tokens, sc.output_tokens) == (100, 7)
    assert sc == scenario_from_options(opts("--input-tokens", "100", "--output-tokens", "7"))
    sc = scenario_from_options(opts("--seed", "7"))
    assert (sc.prompt.seed, sc.rate.seed) == (7, 7)
    sc = scenario_from_options(opts("--seed", "7", "--arrival-seed", "3"))  # the specific one wins
    assert (sc.prompt.seed, sc.rate.seed) == (7, 3)
    # the same value twice is not a conflict
    assert scenario_from_options(opts("--input-tokens", "9", "--random-input-len", "9")).input_tokens == 9


@pytest.mark.parametrize("argv, key, fix", [
    (("--input-tokens", "10", "--random-input-len", "12"), "input_tokens (from --random-input-len)",
     "pass one of --input-tokens and --random-input-len"),
    (("--stages", "1,2", "--max-concurrency", "4"), "stages.list (from --max-concurrency)", "pass one of"),
    (("--request-rate", "4", "--max-concurrency", "3"), "--max-concurrency", "--max-inflight N drops"),
    (("--request-rate", "fast"), "rate.list (from --request-rate)", "e.g. --request-rate 4"),
    (("--request-rate", "inf"), "rate.list (from --request-rate)", "pass --max-concurrency C instead"),
    (("--max-concurrency", "1.5"), "stages.list (from --max-concurrency)", "e.g. --max-concurrency 64"),
    (("--seed", "x"), "prompt.seed (from --seed)", None),
    (("--rates", "1", "--burstiness", "0.5"), "rate.burstiness (from --burstiness)", "add --arrival gamma"),
])
def test_alias_mistakes_name_the_flag_and_the_fix(argv, key, fix):
    with pytest.raises(ConfigError) as err:
        scenario_from_options(opts(*argv))
    assert err.value.key == key and "\n" not in str(err.value)
    assert fix is None or fix in err.value.fix


def test_gamma_burstiness_as_vllm_means_it():
    sc = build_scenario({"rate": {"list": [1], "arrival": "gamma", "burstiness": 0.5}})
    assert (sc.rate.arrival, sc.rate.burstiness) == ("gamma", 0.5)


# --- --label and --metadata --------------------------------------------------------------------------


def test_label_and_metadata_are_read_and_kept_out_of_the_scenario():
    parsed = opts("--label", "fp8-kv", "--metadata", "tp=8", "image=v0.9", "--metadata", "note=a b=c")
    tags = tags_from_options(parsed)
    assert tags == RunTags("fp8-kv", {"tp": "8", "image": "v0.9", "note": "a b=c"})
    assert scenario_from_options(parsed) == scenario_from_options(opts())
    assert tags.run_name("smoke_completions-64-32_c1-2") == "smoke_completions-64-32_c1-2_fp8-kv"
    summary = tags.into_summary({"run": {"name": "x"}})
    assert summary["run"] == {"name": "x", "label": "fp8-kv", "metadata": {"tp": "8", "image": "v0.9",
                                                                           "note": "a b=c"}}
    assert tags_text(summary) == " (label fp8-kv; tp=8, image=v0.9, note=a b=c)"
    assert tags_from_options(opts()) == RunTags() and RunTags().run_name("n") == "n"
    assert tags_text({"run": {}}) == ""


@pytest.mark.parametrize("argv, shown", [
    (("--label", "a b"), "'a b'"),
    (("--label", "../up"), "'../up'"),
    (("--metadata", "novalue"), "'novalue'"),
    (("--metadata", "=x"), "'=x'"),
    (("--metadata", "tp=8", "tp=4"), "'tp=4'"),
])
def test_bad_tags_name_the_option_and_value(argv, shown):
    with pytest.raises(ConfigError) as err:
        tags_from_options(opts(*argv))
    assert err.value.key in ("--label", "--metadata") and shown in str(err.value) and err.value.fix


# --- presets -------------------------------------------------------------------------------------


def test_the_presets_are_the_clones_config_files():
    assert bundled.SCENARIOS_DIR.resolve() == (ROOT / "config").resolve()
    assert bundled.scenario_names() == sorted(p.stem for p in (ROOT / "config").glob("*.yaml"))
    assert bundled.resolve_scenario("smoke") == bundled.SCENARIOS_DIR / "smoke.yaml"
    assert bundled.resolve_scenario("nosuch") == Path("nosuch")
    assert bundled.scenario_summary("default").endswith("concurrency 1, 2, 4, ... 1024.")
    assert bundled.scenario_summary("smoke").startswith("A tiny, fast scenario")


def test_a_path_wins_over_a_preset_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("smoke").write_text("name: mine\n")
    assert bundled.resolve_scenario("smoke") == Path("smoke")


# --- subcommands -------------------------------------------------------------------------------------


def test_scenarios_lists_each_preset_with_its_description(capsys):
    assert cli.main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in bundled.scenario_names():
        assert re.search(rf"^{name} +{re.escape(bundled.scenario_summary(name))}$", out, re.M)


def test_grafana_writes_the_kit_and_keeps_existing_files(tmp_path, capsys):
    out = tmp_path / "g"
    assert cli.main(["grafana", str(out)]) == 0
    for name in bundled.GRAFANA_FILES:
        assert (out / name).read_bytes() == (ROOT / "grafana" / name).read_bytes(), name
    assert cli.main(["grafana", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    (out / "prometheus.yml").write_text("mine")
    assert cli.main(["grafana", str(out), "--force"]) == 0
    assert (out / "prometheus.yml").read_bytes() == (ROOT / "grafana" / "prometheus.yml").read_bytes()
    assert cli.main(["grafana"]) == 2


def test_compose_kit_refers_only_to_files_it_writes():
    compose = (ROOT / "grafana" / "docker-compose.yml").read_text()
    for source in re.findall(r"- \./([\w./-]+):", compose):
        assert any(name == source or name.startswith(source + "/") for name in bundled.GRAFANA_FILES), source


def test_unknown_command_and_own_locustfile_are_refused(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
    assert cli.run_locust(["-f", "mine.py"], headless=True) == 2
    assert "locust -f yours.py" in capsys.readouterr().err


def test_help_and_delegation(capsys, tmp_path):
    assert cli.main(["--help"]) == 0 and "load and stages:" in capsys.readouterr().out
    assert cli.main([]) == 0
    assert cli.main(["report", "build", str(tmp_path / "none")]) == 2  # loadgen.report's own exit code
    assert "report:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        cli.main(["sim", "--help"])
    assert done.value.code == 0 and "simulator" in capsys.readouterr().out


_DISCOVER = """
import os, sys
from locust.util.load_locustfile import load_locustfile
users, shapes = load_locustfile(sys.argv[1])
here = os.path.dirname(sys.argv[1]) + os.sep
def in_here(path):  # a module of that folder, or a package right under it
    rel = path[len(here):] if path.startswith(here) else None
    return rel is not None and (os.sep not in rel or rel.endswith(os.sep + "__init__.py") and rel.count(os.sep) == 1)
shadowing = [name for name, m in sys.modules.items() if "." not in name and in_here(getattr(m, "__file__", None) or "")
             and name not in ("locustfile", "loadgen", "shapes")]
print(sorted(users), [type(s).__name__ for s in shapes], shadowing)
"""


@pytest.mark.parametrize("locustfile", [ROOT / "locustfile.py", cli.LOCUSTFILE])
def test_locust_finds_the_users_and_the_shape_in_both_locustfiles(locustfile):
    """The clone's locustfile.py is one import of loadgen/locustfile.py; Locust's own loader (a
    subprocess: it imports the file as the module ``locustfile``) sees the same classes in both.
    While it imports, the file's folder is first on sys.path: for loadgen/locustfile.py that is
    loadgen/, so no module there may be imported as a top-level name (one called like a library
    module, e.g. ``trace``, would stand in for it)."""
    out = subprocess.run([sys.executable, "-c", _DISCOVER, str(locustfile)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['LLMUser', 'RateUser'] ['SweepShape'] []"


# --- pointers to documentation -------------------------------------------------------------------

_README_SECTION = re.compile(r"README ['\"]([^'\"]+)['\"]")
_REPO_PATH = re.compile(r"\b((?:docs|grafana|config|loadgen/sim)/[a-z0-9_./-]+\.(?:md|yaml))\b")
_PAGE_SECTION = re.compile(r"\b(docs/[a-z0-9_.-]+\.md) ['\"]([^'\"]+)['\"]")


def headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")]


def pointers(text: str) -> tuple[int, list[str]]:
    """(how many pointers to documentation ``text`` holds, those that point nowhere)."""
    found = [*((f"README '{s}'", any(h.startswith(s) for h in headings(ROOT / "README.md")))
               for s in _README_SECTION.findall(text)),
             *((ref, (ROOT / ref).is_file()) for ref in _REPO_PATH.findall(text)),
             *((f"{page} '{s}'", (ROOT / page).is_file() and any(h.startswith(s) for h in headings(ROOT / page)))
               for page, s in _PAGE_SECTION.findall(text))]
    return len(found), [name for name, ok in found if not ok]


def test_every_pointer_to_documentation_in_the_code_exists():
    """A message saying "see docs/workloads.md 'Datasets'", "docs/cli.md" or "README 'Install'"
    points at a page that exists and, where one is named, a section of it (docs/ is in the installed
    package too: loadgen/docs). Read in the code, the scripts and the scenario presets' comments."""
    sources = [*(ROOT / "loadgen").rglob("*.py"), *(ROOT / "shapes").rglob("*.py"), *(ROOT / "scripts").glob("*.py"),
               *(ROOT / "config").glob("*.yaml"), *(ROOT / "config").glob("*/*.md")]
    seen = 0
    for path in sorted(sources):
        count, broken = pointers(path.read_text(encoding="utf-8"))
        seen += count
        assert broken == [], f"{path} points at {broken}, which do not exist"
    assert seen >= 10


def test_a_pointer_to_a_missing_page_or_section_is_caught():
    assert pointers("see docs/workloads.md 'Datasets' and docs/cli.md") == (3, [])  # the page, its section, cli.md
    text = "see docs/workloads.md 'No such part', docs/nosuch.md 'X', README 'No such part', config/nosuch.yaml"
    assert sorted(pointers(text)[1]) == ["README 'No such part'", "config/nosuch.yaml", "docs/nosuch.md",
                                         "docs/nosuch.md 'X'", "docs/workloads.md 'No such part'"]


# --- the tags in report.html and compare -----------------------------------------------------------


def test_report_and_compare_show_the_label_and_metadata(tmp_path):
    from loadgen.report.compare import format_compare_table, load_runs, render_compare_html
    from loadgen.report.html import render_report_html

    fixtures = ROOT / "tests" / "fixtures"
    dirs = []
    for name, tags in (("seeds_sweep", RunTags("bf16", {"tp": "8"})), ("vllm_sweep", RunTags())):
        summary = json.loads((fixtures / f"summary_{name}.json").read_text())
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(tags.into_summary(summary)))
        dirs.append(tmp_path / name)
    html = render_report_html(json.loads((dirs[0] / "summary.json").read_text()))
    assert "<th>label</th><td>bf16</td>" in html and "<th>metadata</th><td>tp=8</td>" in html
    runs = load_runs(dirs)
    table = format_compare_table(runs)
    assert "#1 = seeds_sweep (label bf16; tp=8)" in table and "#2 = vllm_sweep\n" in table
    assert "seeds_sweep (label bf16; tp=8)" in render_compare_html(runs, table, {})
