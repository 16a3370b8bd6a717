"""Version shims: the one place that knows which Python provides what."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:
    # tomli is only installed where it is needed (Python < 3.11), so a type checker running on
    # a newer interpreter cannot see it; it still checks this branch because the project's
    # mypy target is 3.9.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["tomllib"]
