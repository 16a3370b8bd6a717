"""The worked examples of the documents, for the tests that run them: a topic's fenced blocks
(TOML, shell), found as tests/test_docs_commands.py finds its command lines (the fences of
README.md and docs/*.md); and the anchors GitHub gives their headings, which links name."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def example(topic: str, language: str, containing: str) -> str:
    """The one `````language`` block of docs/``topic`` that holds ``containing``."""
    blocks: list[str] = []
    opened: str | None = None  # the open block's language; None: outside any
    lines: list[str] = []
    for line in (DOCS / topic).read_text().splitlines():
        if not line.strip().startswith("```"):
            lines.append(line)
        elif opened is None:
            opened, lines = line.strip()[3:], []
        else:
            if opened == language:
                blocks.append("\n".join(lines) + "\n")
            opened = None
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"docs/{topic}: {len(found)} {language} blocks hold {containing!r}"
    return found[0]


def toml_example(topic: str, containing: str) -> str:
    """The one ```toml block of docs/``topic`` that holds ``containing``."""
    return example(topic, "toml", containing)


def replaced(text: str, old: str, new: str) -> str:
    """``text`` with its one ``old`` made ``new``: a test's change to a documented example,
    which fails loudly once the document no longer says ``old``."""
    assert text.count(old) == 1, f"{old!r} is not once in:\n{text}"
    return text.replace(old, new)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text lower-cased, everything but letters,
    digits, spaces, ``-`` and ``_`` dropped, spaces made ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")
