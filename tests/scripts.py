"""The project's scripts that are no package's module, loaded as modules for the tests:
packaging/image/oci.py (which writes `make image`'s OCI archive: the image tests read its
rules, the real node's images are written by it) and the Ansible role's filter plugin."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OCI_SCRIPT = REPO / "packaging" / "image" / "oci.py"


def load_script(path: Path, name: str) -> ModuleType:
    """The Python file at ``path``, run as a module called ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def oci_module() -> Any:
    return load_script(OCI_SCRIPT, "oci")
