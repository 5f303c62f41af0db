"""``llm-loadgen docs``: every pointer the code prints (docs/<page>.md 'Section') can be read with it,
from the pages the package carries (loadgen/docs; tests/integration/test_wheel.py runs it from the wheel)."""

from __future__ import annotations

import pytest

from loadgen.cli import main
from loadgen.cli_docs import headings, section
from loadgen.config.bundled import DOCS_DIR
from tests.unit.faces.test_cli import _PAGE_SECTION, ROOT


def code_pointers() -> set[tuple[str, str]]:
    sources = [*(ROOT / "loadgen").rglob("*.py"), *(ROOT / "shapes").rglob("*.py"), *(ROOT / "config").glob("*.yaml")]
    return {m for path in sources for m in _PAGE_SECTION.findall(path.read_text(encoding="utf-8"))}


def test_every_pointer_in_the_code_reads_as_its_section(capsys):
    found = code_pointers()
    assert len(found) >= 8 and ("docs/slo.md", "Percentile limits") in found
    for page, wanted in sorted(found):
        assert main(["docs", page, wanted]) == 0, (page, wanted)  # the pointer, pasted as it is printed
        out = capsys.readouterr().out
        first = out.splitlines()[0]
        assert first.startswith("#") and first.lstrip("#").strip().startswith(wanted), (page, wanted, first)
        assert out in (DOCS_DIR / page.removeprefix("docs/")).read_text(encoding="utf-8")


def test_a_page_by_its_short_name_prints_all_of_it_and_path_names_the_file(capsys):
    assert main(["docs", "slo"]) == 0
    assert capsys.readouterr().out == (DOCS_DIR / "slo.md").read_text(encoding="utf-8")
    assert main(["docs", "slo.md", "--path"]) == 0
    assert capsys.readouterr().out.strip() == str(DOCS_DIR / "slo.md")


def test_the_listing_names_every_page_and_the_folder(capsys):
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines() if line.strip() and not line.startswith("in ")]
    assert rows == sorted(p.stem for p in DOCS_DIR.glob("*.md")) and "slo" in rows
    assert f"in {DOCS_DIR};" in out


@pytest.mark.parametrize(("args", "said"), [
    (["sloo"], "no page 'sloo'; did you mean slo?"),
    (["slo", "No such part"], "slo has no section 'No such part'; its sections: SLO: the largest"),
    (["slo", "Percentile limits", "extra"], "takes a page and a section at most"),
    (["--all"], "takes a page and a section at most"),
])
def test_a_wrong_page_or_section_exits_2_naming_what_there_is(capsys, args, said):
    assert main(["docs", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-loadgen: docs: ") and said in err and len(err.strip().splitlines()) == 1


def test_a_section_ends_at_the_next_heading_of_its_level_and_fenced_hashes_are_not_headings():
    text = ("# Page\n\n## A\n\ntext\n\n```bash\n# a shell comment\nmake demo\n```\n\n### A.1\n\nmore\n\n"
            "## B\n\nlast\n")
    assert [(level, title) for _, level, title in headings(text.splitlines())] == [
        (1, "Page"), (2, "A"), (3, "A.1"), (2, "B")]
    assert section(text, "A") == ("## A\n\ntext\n\n```bash\n# a shell comment\nmake demo\n```\n\n"
                                  "### A.1\n\nmore\n")
    assert section(text, "a.1") == "### A.1\n\nmore\n"  # a heading is found whatever its case
    assert section(text, "B") == "## B\n\nlast\n" and section(text, "C") is None
