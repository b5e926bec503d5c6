"""The README opens the door and the docs hold the rest: the README stays short, and no link of it or of
``docs/`` leads nowhere.

A relative link must name a file or folder of the repository, and a ``#anchor`` into a Markdown page must be one of
that page's headings, slugged as GitHub slugs them. What the README must still show a newcomer (the two set-up
commands first, a link to the docs index) and what the docs index must reach (every page, every command) is checked
here too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from drill.cli.main import SUBCOMMANDS
from drill.spec.loader import load_drill

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """Each line outside fenced code blocks, with its number and without its inline code spans."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, _CODE_SPAN.sub("", line)))
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (code marks too), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            slug = _slug(heading.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _relative_links(page: Path) -> list[tuple[int, str]]:
    links = []
    for number, line in _prose_lines(page.read_text()):
        for target in _LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto: ...
                links.append((number, target))
    return links


def _broken(page: Path, target: str) -> str | None:
    """Why a relative link of ``page`` leads nowhere, or None."""
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.is_relative_to(REPO):
        return "points outside the repository"
    if not dest.exists():
        return f"{dest.relative_to(REPO)} does not exist"
    if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
        return f"{dest.relative_to(REPO)} has no heading #{anchor}"
    return None


def test_the_readme_is_at_most_300_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; reference material belongs in docs/"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = [
        f"{page.relative_to(REPO)}:{number}: ({target}) {why}"
        for number, target in _relative_links(page)
        if (why := _broken(page, target))
    ]
    assert not broken, "\n".join(broken)


def test_the_link_checker_catches_a_missing_page_and_a_missing_heading(tmp_path: Path) -> None:
    assert _broken(README, "docs/README.md") is None
    assert _broken(README, "docs/no-such-page.md") == "docs/no-such-page.md does not exist"
    assert _broken(README, "docs/commands.md#exit-codes") is None
    assert _broken(README, "docs/commands.md#no-such-heading") == "docs/commands.md has no heading #no-such-heading"
    assert _broken(DOCS / "README.md", "../../elsewhere.md") == "points outside the repository"
    page = tmp_path / "page.md"
    lines = ["# A title", "", "## Capacity: `drill capacity`", "", "```", "# not a heading", "```"]
    page.write_text("\n".join([*lines, "[x](#a-title) `[y](nowhere.md)`", ""]))
    assert _anchors(page) == {"a-title", "capacity-drill-capacity"}
    assert _relative_links(page) == [(8, "#a-title")]


def test_the_readme_starts_with_the_two_set_up_commands_and_links_the_docs_index() -> None:
    text = README.read_text()
    head = "\n".join(text.splitlines()[:8])
    assert "./dev drill run drills/unbounded-queue.yaml" in head and "./dev test" in head
    assert any(target == "docs/README.md" for _, target in _relative_links(README))


def test_the_docs_index_reaches_every_page() -> None:
    index = DOCS / "README.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for _, target in _relative_links(index)}
    missing = [str(p.relative_to(REPO)) for p in sorted(DOCS.rglob("*.md")) if p != index and p not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def test_every_command_is_documented() -> None:
    commands = (DOCS / "commands.md").read_text()
    missing = [name for name in SUBCOMMANDS if f"`drill {name}" not in commands]
    assert not missing, f"docs/commands.md does not describe drill {missing}"


def test_the_smoke_drill_the_readme_runs_is_valid() -> None:
    assert "./dev drill run docs/examples/smoke.yaml" in README.read_text()
    loaded = load_drill(DOCS / "examples" / "smoke.yaml")
    assert loaded.drill.name == "smoke" and [f.kind for f in loaded.drill.faults] == ["queue_flood"]
