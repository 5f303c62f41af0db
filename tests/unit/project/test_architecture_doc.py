"""docs/development/ARCHITECTURE.md's package and module tables are the code's (scripts/architecture.py)."""

from __future__ import annotations

from scripts import architecture


def test_every_module_has_a_row():
    doc = architecture.DOC.read_text(encoding="utf-8")
    missing = [p.relative_to(architecture.ROOT).as_posix() for p in architecture.modules().values()
               if p.name != "__init__.py" and f"| `{p.relative_to(architecture.ROOT).as_posix()}` |" not in doc]
    assert missing == [], f"modules missing from docs/development/ARCHITECTURE.md (run python scripts/architecture.py): {missing}"


def test_the_tables_are_up_to_date():
    doc = architecture.DOC.read_text(encoding="utf-8")
    assert architecture.rewrite(doc, architecture.generate()) == doc, "run python scripts/architecture.py"


def test_a_module_job_is_its_docstrings_first_sentence(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Does one thing. Then\\nmore: details | here.\\n\\nMore."""\n')
    assert architecture.first_sentence(f) == "Does one thing"
    f.write_text('"""A job: with a colon, and a pipe | in it"""\n')
    assert architecture.first_sentence(f) == "A job: with a colon, and a pipe \\| in it"
