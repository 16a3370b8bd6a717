"""token-resource: serve Kubernetes extended resources ("tokens") from one TOML file."""

import sys
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

# The directory this package was imported from: `status --json` reports it, so that an upgrade
# can be seen to run the new installation's code.
PACKAGE_DIR = Path(__file__).resolve().parent
DISTRIBUTION = "token-resource"


def _own_version() -> str:
    """The version of the installation this code came from: the metadata beside the package's
    directory (a package's dist-packages, an unpacked tree), else the one importlib finds first
    (an editable install keeps its metadata elsewhere). The first found alone could be another
    installation's, when two are on the path."""
    for found in distributions(path=[str(PACKAGE_DIR.parent)]):
        name = str(found.metadata["Name"] or "").lower().replace("_", "-")
        if name == DISTRIBUTION:
            return str(found.version)
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


__version__ = _own_version()

# Libraries a package brings because its distribution lacks them: the EL9 RPM puts watchdog in
# /usr/lib/token-resource/vendor (packaging/README.md). Found relative to this package
# (/usr/lib/python3.Y/site-packages/token_resource), so that an installation under another
# root finds its own; appended, so that a distribution's own copy still comes first.
VENDOR_DIR = PACKAGE_DIR.parents[2] / "token-resource" / "vendor"
if VENDOR_DIR.is_dir() and str(VENDOR_DIR) not in sys.path:
    sys.path.append(str(VENDOR_DIR))
