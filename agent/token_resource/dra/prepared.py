"""The claims the agent prepared, kept on disk: the kubelet asks again after its own restart,
and an agent restart must change nothing for running pods.

One JSON file in the driver's directory, rewritten atomically after every change; keyed by
claim UID, as the kubelet's calls are. Two instances of the agent may share it during a
rollout: every change is made under a flock of ``serialize.lock`` beside it (the file the
Kubernetes plugin helper locks to serialize its instances), from the file as read under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATE_FILE = "prepared.json"
LOCK_FILE = "serialize.lock"
# How often a lock held by the other instance is tried again (held for a file write, so briefly).
_LOCK_POLL_SECONDS = 0.005
_FORMAT = 1


@dataclass(frozen=True)
class PreparedDevice:
    request: str
    pool: str
    device: str  # the token ID
    resource: str
    env: str  # the variable that names the token to the container
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    pods: tuple[str, ...]
    devices: tuple[PreparedDevice, ...]


class PreparedClaims(Mapping[str, PreparedClaim]):
    """Claim UID -> what was prepared for it; every change saved before it is answered."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / STATE_FILE
        self._lock_path = directory / LOCK_FILE
        self._claims: dict[str, PreparedClaim] = {}
        # Made on first use, inside the event loop (Python 3.9 binds a lock to a loop).
        self._local: asyncio.Lock | None = None

    @contextlib.asynccontextmanager
    async def changing(self) -> AsyncIterator[None]:
        """Hold the claims for a change, alone among this agent's calls and other instances',
        with what is on disk now. Polled: a flock blocked in a thread would outlive a stop."""
        if self._local is None:
            self._local = asyncio.Lock()
        async with self._local:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(_LOCK_POLL_SECONDS)
                self.load()
                yield
            finally:
                os.close(fd)

    def load(self) -> None:
        """Read what an earlier run prepared; a missing file is none, a broken one is logged
        and taken as none (the kubelet prepares again what it needs)."""
        try:
            document = json.loads(self._path.read_text())
            self._claims = {uid: _claim(entry) for uid, entry in document.get("claims", {}).items()}
        except FileNotFoundError:
            self._claims = {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
            log.error("ignoring %s, which cannot be read: %s", self._path, error)
            self._claims = {}

    def add(self, claim: PreparedClaim) -> None:
        self._claims[claim.uid] = claim
        self._save()

    def remove(self, uid: str) -> PreparedClaim | None:
        claim = self._claims.pop(uid, None)
        if claim is not None:
            self._save()
        return claim

    def __getitem__(self, uid: str) -> PreparedClaim:
        return self._claims[uid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._claims)

    def __len__(self) -> int:
        return len(self._claims)

    def _save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "format": _FORMAT,
            "claims": {uid: asdict(claim) for uid, claim in sorted(self._claims.items())},
        }
        temporary = self._path.with_name(f".{self._path.name}.tmp")
        temporary.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(temporary, self._path)


def claims_on_record(directory: Path) -> int:
    """How many prepared claims an earlier run left in ``directory``: their pods' unprepare
    needs the driver, whatever the files say now."""
    claims = PreparedClaims(directory)
    claims.load()
    return len(claims)


def _claim(entry: Mapping[str, Any]) -> PreparedClaim:
    return PreparedClaim(
        namespace=str(entry["namespace"]),
        name=str(entry["name"]),
        uid=str(entry["uid"]),
        pods=tuple(map(str, entry["pods"])),
        devices=tuple(
            PreparedDevice(
                request=str(device["request"]),
                pool=str(device["pool"]),
                device=str(device["device"]),
                resource=str(device["resource"]),
                env=str(device["env"]),
                cdi_device_ids=tuple(map(str, device["cdi_device_ids"])),
            )
            for device in entry["devices"]
        ),
    )
