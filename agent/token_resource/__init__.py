"""token-resource: serve Kubernetes extended resources ("tokens") from one TOML file."""

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("token-resource")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

# Libraries a package brings because its distribution lacks them: the EL9 RPM puts watchdog in
# /usr/lib/token-resource/vendor (packaging/README.md). Found relative to this package
# (/usr/lib/python3.Y/site-packages/token_resource), so that an installation under another
# root finds its own; appended, so that a distribution's own copy still comes first.
VENDOR_DIR = Path(__file__).resolve().parents[3] / "token-resource" / "vendor"
if VENDOR_DIR.is_dir() and str(VENDOR_DIR) not in sys.path:
    sys.path.append(str(VENDOR_DIR))
