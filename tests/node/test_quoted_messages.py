"""The scheduler's words that the docs and the token-demo example quote are the ones the real
node's scheduler printed (modes.py, which the node's tests check against the real one): a
change of them on a new release fails there, and this keeps the quotes in step. Needs no node."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.node.modes import CANNOT_ALLOCATE, INSUFFICIENT

REPO = Path(__file__).resolve().parents[2]
QUOTING = (
    REPO / "docs" / "kubernetes.md",
    REPO / "deploy" / "kubernetes" / "examples" / "token-demo" / "deployment.yaml",
)


def flattened(path: Path) -> str:
    """The file's text with comment markers and line breaks folded into single spaces."""
    text = re.sub(r"^\s*#\s?", "", path.read_text(), flags=re.MULTILINE)
    return " ".join(text.split())


@pytest.mark.parametrize("path", QUOTING, ids=lambda path: path.name)
@pytest.mark.parametrize("message", [INSUFFICIENT, CANNOT_ALLOCATE])
def test_the_quoted_message_is_the_real_schedulers(path: Path, message: str) -> None:
    assert message in flattened(path), f"{path} does not quote {message!r}"
