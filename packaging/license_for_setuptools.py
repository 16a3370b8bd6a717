"""Give an older setuptools the ``project.license`` it can read, in a build's copy of the tree.

pyproject.toml says ``license = "Apache-2.0"``, the SPDX form of PEP 639, which setuptools
reads from 77.0 on (and which newer ones require: the table form is deprecated). The system
setuptools of the distributions we build on is older (Debian 12's 66, and what an EL9 build
host may have) and refuses a string there, so a package build without an isolated environment
(pybuild, rpmbuild) runs this first: with such a setuptools the line becomes the table form
``license = { text = "Apache-2.0" }``, else the file is left as it is.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

SPDX_FORM = re.compile(r'^license = "([^"]+)"$', re.MULTILINE)


def reads_spdx(setuptools_version: str) -> bool:
    return int(setuptools_version.split(".", maxsplit=1)[0]) >= 77


def main(path: str) -> None:
    if reads_spdx(version("setuptools")):
        return
    pyproject = Path(path)
    text, count = SPDX_FORM.subn(r'license = { text = "\1" }', pyproject.read_text())
    if count != 1:
        sys.exit(f"{path}: no project.license in the SPDX form to rewrite")
    pyproject.write_text(text)


if __name__ == "__main__":
    main(*sys.argv[1:])
