"""The docs' pictures cannot go stale silently: each docs/diagrams/*.dot is drawn again by
Graphviz (`make diagrams` draws them for the docs) and must show what the committed .svg beside
it shows, and every picture is shown by a document.

"Shows" is each node's, edge's and box's name, its text and how its lines are drawn (solid or
dashed), in order: not the coordinates, which follow the fonts' metrics and so the machine's
fonts, while a changed label, node, arrow or style changes what is compared."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

REPO = Path(__file__).resolve().parents[1]
DIAGRAMS = REPO / "docs" / "diagrams"
SOURCES = sorted(DIAGRAMS.glob("*.dot"))
SVG = "{http://www.w3.org/2000/svg}"

Drawing = list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]


def drawn(svg: str) -> Drawing:
    """What an SVG of Graphviz's shows: per node, edge and cluster, in order, its class, its
    title, its lines of text and each shape's dash pattern."""
    shown: Drawing = []
    for group in ElementTree.fromstring(svg).iter(f"{SVG}g"):
        kind = group.get("class")
        if kind not in {"node", "edge", "cluster"}:
            continue
        title = group.findtext(f"{SVG}title", default="")
        texts = tuple(text.text or "" for text in group.iter(f"{SVG}text"))
        strokes = tuple(
            shape.get("stroke-dasharray", "solid")
            for shape in group
            if shape.tag in {f"{SVG}{name}" for name in ("path", "polygon", "ellipse")}
        )
        shown.append((kind, title, texts, strokes))
    return shown


def render(source: str) -> str:
    dot = shutil.which("dot")
    assert dot, "Graphviz's dot is missing: install the graphviz package (.ci/run does)"
    return subprocess.run(
        [dot, "-Tsvg"], input=source, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("source", SOURCES, ids=[path.stem for path in SOURCES])
def test_the_committed_picture_shows_its_source(source: Path) -> None:
    picture = source.with_suffix(".svg")
    assert picture.exists(), f"{picture.name} is missing: run make diagrams"
    committed = drawn(picture.read_text())
    assert committed, f"{picture.name} shows nothing"
    assert drawn(render(source.read_text())) == committed, (
        f"{picture.name} is stale: run make diagrams"
    )


def test_a_changed_source_differs_from_its_picture() -> None:
    source = DIAGRAMS / "dataflow.dot"
    committed = drawn(source.with_suffix(".svg").read_text())
    relabelled = source.read_text().replace("parse, merge, validate", "parse, validate")
    assert drawn(render(relabelled)) != committed
    dashed = source.read_text().replace("diff -> apply\n", "diff -> apply [style=dashed]\n")
    assert drawn(render(dashed)) != committed


def test_every_picture_has_a_source_and_is_shown_in_the_docs() -> None:
    assert len(SOURCES) >= 6
    pictures = sorted(DIAGRAMS.glob("*.svg"))
    assert [path.stem for path in pictures] == [path.stem for path in SOURCES]
    documents = "\n".join(
        path.read_text() for path in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    )
    unshown = [path.name for path in pictures if f"diagrams/{path.name})" not in documents]
    assert not unshown, f"no document shows {unshown}"
