"""``llm-loadgen docs [PAGE [SECTION]]``: the reference pages that the installed package carries.

A message of the tool points at documentation as ``docs/<page>.md 'Section'``, e.g. ``see
docs/slo.md 'Percentile limits'``. In a clone that is a file of the repository. After ``pip install
llm-loadgen`` there is no docs/ folder, but the wheel carries the pages inside the package
(``loadgen/docs``, pyproject.toml package-data), and this command reads them from there:

    llm-loadgen docs                                    the pages and the folder that holds them
    llm-loadgen docs slo                                the page (slo.md and docs/slo.md work too)
    llm-loadgen docs docs/slo.md 'Percentile limits'    that section alone: the pointer, pasted
    llm-loadgen docs slo --path                         the page's file, for a viewer of your own
    llm-loadgen docs --path                             the folder
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

from loadgen.config.bundled import DOCS_DIR
from loadgen.errors import EXIT_CONFIG

USAGE = "llm-loadgen docs [PAGE [SECTION]] [--path], e.g. llm-loadgen docs slo 'Percentile limits'"
_FENCE = re.compile(r"^\s*(```|~~~)")


def pages(docs_dir: Path) -> list[str]:
    return sorted(p.stem for p in docs_dir.glob("*.md"))


def page_name(arg: str) -> str:
    """``slo``, ``slo.md`` and ``docs/slo.md`` all name the page slo."""
    name = arg.strip().removeprefix("docs/")
    return name.removesuffix(".md")


def headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, text) of each Markdown heading, outside fenced code (where ``#`` starts a
    shell comment)."""
    out, fenced = [], False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append((i, level, line[level:].strip()))
    return out


def section(text: str, wanted: str) -> str | None:
    """The section whose heading starts with ``wanted`` (as a pointer names it), up to the next
    heading of the same or a higher level; None if no heading starts so."""
    lines = text.splitlines()
    marks = headings(lines)
    for n, (start, level, title) in enumerate(marks):
        if title.lower().startswith(wanted.lower()):
            end = next((i for i, lv, _ in marks[n + 1:] if lv <= level), len(lines))
            return "\n".join(lines[start:end]).rstrip() + "\n"
    return None


def _fail(message: str) -> int:
    print(f"llm-loadgen: docs: {message}", file=sys.stderr, flush=True)
    return EXIT_CONFIG


def docs_command(args: list[str], docs_dir: Path = DOCS_DIR) -> int:
    show_path = "--path" in args
    rest = [a for a in args if a != "--path"]
    if any(a.startswith("-") for a in rest) or len(rest) > 2:
        return _fail(f"takes a page and a section at most, got {' '.join(args)!r}; {USAGE}")
    names = pages(docs_dir)
    if not names:
        return _fail(f"no pages in {docs_dir}: this installation lacks its docs; reinstall llm-loadgen")
    if not rest and show_path:
        print(docs_dir)
        return 0
    if not rest:
        width = max(map(len, names))
        for name in names:
            first = (docs_dir / f"{name}.md").read_text(encoding="utf-8").partition("\n")[0]
            print(f"{name:<{width}}  {first.lstrip('#').strip()}")
        print(f"\nin {docs_dir}; read one with {USAGE}")
        return 0
    name = page_name(rest[0])
    if name not in names:
        near = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        return _fail(f"no page {rest[0]!r}; {hint}the pages are {', '.join(names)} (llm-loadgen docs lists them)")
    path = docs_dir / f"{name}.md"
    if show_path:
        print(path)
        return 0
    text = path.read_text(encoding="utf-8")
    if len(rest) == 2:
        part = section(text, rest[1])
        if part is None:
            titles = [t for _, _, t in headings(text.splitlines())]
            return _fail(f"{name} has no section {rest[1]!r}; its sections: {'; '.join(titles)}")
        text = part
    sys.stdout.write(text)
    return 0
