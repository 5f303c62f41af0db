"""The documentation: the site builds with `mkdocs build --strict` (a broken link or anchor, or a page
of docs/ missing from mkdocs.yml's nav, fails it), and every relative link in README.md and
docs/*.md names a file that exists (the README is not part of the site, so its links into docs/
are checked here, anchors included)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    # not --quiet: it silences the warnings that --strict counts, and a broken link would pass
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=120)


def test_the_site_builds_in_strict_mode_with_every_page(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    for page in (ROOT / "docs").glob("*.md"):
        built = tmp_path / "site" / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"
    for page in (ROOT / "docs" / "development").glob("*.md"):  # out of nav, built all the same
        name = "index.html" if page.stem == "index" else f"{page.stem}/index.html"
        built = tmp_path / "site" / "development" / name
        assert built.is_file(), f"development/{page.name} was not built"


@pytest.mark.parametrize("breakage, said", [
    ("[gone](nosuch.md)", "nosuch.md"),
    ("[gone](sweep.md#no-such-section)", "no-such-section"),
    (None, "orphan.md"),  # a page that nav does not list
])
def test_a_broken_link_or_a_page_missing_from_nav_fails_the_build(tmp_path, breakage, said):
    shutil.copytree(ROOT / "docs", tmp_path / "docs", symlinks=True)
    shutil.copy2(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    if breakage:
        with open(tmp_path / "docs" / "index.md", "a", encoding="utf-8") as f:
            f.write(f"\n{breakage}\n")
    else:
        (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n")
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0 and said in done.stderr, done.stderr[-3000:]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {github_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def relative_links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "docs" / "development").glob("*.md"))]
    seen, broken = 0, []
    for page in pages:
        for target in relative_links(page):
            seen += 1
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors_of(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading in {file.name})")
    assert broken == []
    assert seen >= 20


def test_the_readme_links_into_the_docs_and_the_docs_index_lists_every_page():
    readme = {t.partition("#")[0] for t in relative_links(ROOT / "README.md")}
    index = {t.partition("#")[0] for t in relative_links(ROOT / "docs" / "index.md")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages <= index, pages - index
    assert {f"docs/{p}" for p in pages} <= readme, {f"docs/{p}" for p in pages} - readme


# The user pages say what a user does and sees; how it was measured, on which machine, in which test
# run, lives in docs/development/ (out of the navigation: mkdocs.yml not_in_nav).
LAB_NOTEBOOK = ("nice -n", "development machine", "this session", "done-when", "seen here", "on this machine")


def test_the_user_pages_are_short_and_carry_no_lab_notes():
    long, notes = [], []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if page.name != "cli.md" and len(text.splitlines()) >= 300:  # cli.md is the option table, generated
            long.append(f"{page.name}: {len(text.splitlines())} lines")
        notes += [f"{page.name}: {said!r}" for said in LAB_NOTEBOOK if said in text.lower()]
        notes += [f"{page.name}: {said!r}" for said in re.findall(r"\bissue \d+", text, flags=re.I)]  # our tracker's
    assert long == [] and notes == [], (long, notes)


def test_the_development_pages_are_built_but_out_of_the_navigation(tmp_path):
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:", 1)[1].split("\nnot_in_nav:", 1)[0]
    assert "development/" not in nav and "not_in_nav: |\n  development/" in config
    assert (ROOT / "docs" / "development" / "ARCHITECTURE.md").is_file()
