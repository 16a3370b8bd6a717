"""Every relative link of the Markdown documents resolves: README.md, docs/**/*.md and the
packaging READMEs. A link's file must exist, and its ``#anchor`` must be a heading of the
Markdown file it names, slugged as GitHub does. Moving a section to another page breaks the
links to it; this finds them before a reader does."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.documented import slug

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted(
    {
        REPO / "README.md",
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "packaging").rglob("README*.md"),
    }
)
# [text](target) and ![alt](target); the text may hold inline code but no brackets.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) outside fenced code blocks, inline code spans removed: what the
    reader sees as text, where links and headings can be."""
    lines = []
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path):
        text = re.sub(r"`[^`]*`", "", line)
        found += [(number, target) for target in INLINE_LINK.findall(text)]
        found += [(number, target) for target in REFERENCE_LINK.findall(text)]
    return found


def broken(path: Path, root: Path = REPO) -> list[str]:
    """One line per broken link of ``path``, its places named relative to ``root``."""
    problems = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not linked.exists():
            problems.append(f"{where}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading #{anchor} in {linked.relative_to(root)}")
    return problems


def test_the_documents_are_found() -> None:
    names = {path.relative_to(REPO).as_posix() for path in DOCUMENTS}
    assert {"README.md", "docs/kubernetes.md", "packaging/README-system-tests.md"} <= names
    assert sum(len(links(path)) for path in DOCUMENTS) >= 50


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(path: Path) -> None:
    problems = broken(path)
    assert not problems, "\n".join(problems)


def test_the_slugs_are_githubs() -> None:
    assert slug("Rolling updates: two instances for a moment") == (
        "rolling-updates-two-instances-for-a-moment"
    )
    assert slug("The license server's tool in Kubernetes") == (
        "the-license-servers-tool-in-kubernetes"
    )
    assert slug("`token-resource status`, seen") == "token-resource-status-seen"


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-part) [gone](missing.md) [no part](other.md#b-part)\n"
        "[self](#page) [web](https://example.com/x.md)\n\n```\n[in code](nowhere.md)\n```\n"
    )
    problems = [problem.split(": ", 1)[1] for problem in broken(page, tmp_path)]
    assert problems == [
        "missing.md: no such file",
        "other.md#b-part: no heading #b-part in other.md",
    ]
