"""packaging/image/oci.py, the script that writes `make image`'s OCI archive, loaded as a module
(it is no package's): the image tests read its rules, the real node's images are written by it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "packaging" / "image" / "oci.py"


def oci_module() -> Any:
    spec = importlib.util.spec_from_file_location("oci", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
