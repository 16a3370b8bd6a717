"""docs/architecture.md's module table names every module of the package: by its path, or by
its name in a row that names its folder's sibling (``node_slices.py``, ``slicesync.py``);
``protocol/`` and ``cli/`` by their folder's row."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "agent" / "token_resource"
ARCHITECTURE = REPO / "docs" / "architecture.md"
BY_FOLDER = ("protocol", "cli")


def named_modules(text: str) -> set[str]:
    """The modules the table's rows name, each as a path under the package."""
    named = set()
    for row in text.splitlines():
        if not row.startswith("| `"):
            continue
        first = row.split("|")[1]
        names = re.findall(r"`([\w/]+\.py)`", first)
        folder = next((n.rpartition("/")[0] for n in names if "/" in n), "")
        named |= {n if "/" in n or not folder else f"{folder}/{n}" for n in names}
    return named


def test_every_module_is_in_the_table() -> None:
    modules = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and path.relative_to(PACKAGE).parts[0] not in BY_FOLDER
    }
    text = ARCHITECTURE.read_text()
    for folder in BY_FOLDER:
        assert f"| `{folder}/` |" in text, folder
    missing = sorted(modules - named_modules(text))
    assert not missing, f"docs/architecture.md's module table lacks {missing}"
    gone = sorted(named_modules(text) - modules)
    assert not gone, f"docs/architecture.md's module table names modules that are gone: {gone}"


def test_a_row_names_its_siblings_by_the_first_ones_folder() -> None:
    row = "| `apiserver/keeping/node_slices.py`, `slicesync.py` | keeping the node's pools |"
    assert named_modules(row) == {
        "apiserver/keeping/node_slices.py",
        "apiserver/keeping/slicesync.py",
    }
