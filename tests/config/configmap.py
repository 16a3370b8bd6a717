"""A ConfigMap volume, written the way the kubelet's atomic writer writes one.

pkg/volume/util/atomic_writer.go (Kubernetes 1.2x-1.3x), the steps this follows::

    5. a new timestamped directory, ..YYYY_MM_DD_HH_MM_SS.<random>, is created
    6. the payload is written into it
    8. a symlink ..data_tmp to the new directory is created
    9. ..data_tmp is renamed over ..data (the atomic step)
   10. user-visible symlinks (name -> ..data/name) are created for new names, and those of
       names no longer in the payload removed
   11. the previous timestamped directory is removed
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"


class ConfigMapVolume:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, payload: Mapping[str, str]) -> None:
        data = self.directory / DATA
        old = os.readlink(data) if data.is_symlink() else None
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        new = Path(tempfile.mkdtemp(prefix=stamp, dir=self.directory))
        new.chmod(0o755)
        for name, text in payload.items():
            (new / name).write_text(text)
            (new / name).chmod(0o644)
        os.symlink(new.name, self.directory / DATA_TMP)
        os.rename(self.directory / DATA_TMP, data)
        for name in payload:
            visible = self.directory / name
            if not visible.is_symlink():
                os.symlink(f"{DATA}/{name}", visible)
        for entry in self.directory.iterdir():
            if not entry.name.startswith("..") and entry.name not in payload:
                entry.unlink()
        if old is not None:
            shutil.rmtree(self.directory / old)
