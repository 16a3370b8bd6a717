"""A container runtime's side of CDI: the spec files it reads and the devices it resolves.

Written from the CDI library's rules (container-device-interface ``pkg/cdi`` and
``specs-go/version.go``, as ../shared/docs/dra.md lists them), which containerd, CRI-O and
podman run when they create a container: every ``*.json`` / ``*.yaml`` file of the CDI
directories is a spec; a spec that breaks a rule is refused whole, with the library's words
(``the spec version must be at least v0.5.0``), and its devices cannot be resolved; a CDI ID
that no valid spec names fails the container (``unresolvable CDI devices ...``). It models
only what a spec of environment variables can use: a spec with other container edits is
refused as not modelled here, so a change to what the agent writes cannot pass unexamined.
The real library is run by tests/system/test_cdi_containerd.py (Debian 13's containerd).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# Every spec version the newest library knows; older libraries know a prefix of it.
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_VENDOR = re.compile(r"[A-Za-z](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_MODELLED_EDITS = {"env"}


class UnresolvableDevices(Exception):
    """What the runtime says when a container names CDI devices it cannot find."""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _needed_version(spec: Mapping[str, Any]) -> tuple[str, str]:
    """The lowest version whose rules allow what the spec uses, and why."""
    kind = str(spec.get("kind", ""))
    names = [str(device.get("name", "")) for device in spec.get("devices", [])]
    if spec.get("annotations") or any(d.get("annotations") for d in spec.get("devices", [])):
        return "0.6.0", "annotations"
    if "." in kind.partition("/")[2]:
        return "0.6.0", f"a '.' in the class of kind {kind}"
    for name in names:
        if name and not re.match(r"[A-Za-z]", name):
            return "0.5.0", f"device name {name} does not begin with a letter"
    return "0.3.0", "environment variables only"


@dataclass(frozen=True)
class SpecFile:
    path: Path
    kind: str
    # device name -> the env entries a container using it gets: the spec's own, then its own
    devices: Mapping[str, Sequence[str]]


def read_spec(path: Path, known_versions: Sequence[str] = KNOWN_VERSIONS) -> SpecFile:
    """One spec file as the library reads it; ValueError with the library's reason if refused."""
    try:
        spec = yaml.safe_load(path.read_text())  # JSON is YAML too, as the library reads both
    except yaml.YAMLError as error:
        raise ValueError(f"failed to parse CDI Spec {path}: {error}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"failed to parse CDI Spec {path}: not a mapping")
    version = str(spec.get("cdiVersion", ""))
    if version not in known_versions:
        raise ValueError(f"invalid CDI Spec: invalid version {version!r}")
    needed, reason = _needed_version(spec)
    if _version_key(version) < _version_key(needed):
        raise ValueError(
            f"invalid CDI Spec: the spec version must be at least v{needed} ({reason})"
        )
    kind = str(spec.get("kind", ""))
    vendor, slash, device_class = kind.partition("/")
    if not slash or not _VENDOR.fullmatch(vendor) or not _CLASS.fullmatch(device_class):
        raise ValueError(f"invalid CDI Spec: invalid kind {kind!r}")
    common = _env(spec.get("containerEdits") or {}, "the spec")
    devices: dict[str, Sequence[str]] = {}
    for device in spec.get("devices") or []:
        name = str(device.get("name", ""))
        if not _DEVICE.fullmatch(name):
            raise ValueError(f"invalid CDI Spec: invalid device name {name!r}")
        if name in devices:
            raise ValueError(f"invalid CDI Spec: duplicate device {name!r}")
        devices[name] = [*common, *_env(device.get("containerEdits") or {}, f"device {name}")]
    if not devices:
        raise ValueError("invalid CDI Spec: invalid spec, no devices")
    return SpecFile(path, kind, devices)


def _env(edits: Mapping[str, Any], where: str) -> Sequence[str]:
    unmodelled = set(edits) - _MODELLED_EDITS
    if unmodelled:
        raise ValueError(f"{where}: container edits not modelled here: {sorted(unmodelled)}")
    env = [str(entry) for entry in edits.get("env", [])]
    for entry in env:
        if "=" not in entry:
            raise ValueError(f"{where}: invalid environment variable {entry!r}")
    return env


@dataclass
class CdiRuntime:
    """The CDI registry of a runtime over ``directories`` (later ones win, as /var/run/cdi over
    /etc/cdi), read afresh on every container, as runtimes refresh it."""

    directories: Sequence[Path]
    known_versions: Sequence[str] = KNOWN_VERSIONS

    def specs(self) -> tuple[dict[str, SpecFile], dict[Path, str]]:
        """The valid specs by kind, and the refused files with the reason for each."""
        by_kind: dict[str, SpecFile] = {}
        refused: dict[Path, str] = {}
        for directory in self.directories:
            for path in sorted(_spec_files(directory)):
                try:
                    spec = read_spec(path, self.known_versions)
                except ValueError as error:
                    refused[path] = str(error)
                    continue
                by_kind.setdefault(spec.kind, spec)
                if by_kind[spec.kind] is not spec:
                    by_kind[spec.kind] = _merged(by_kind[spec.kind], spec)
        return by_kind, refused

    def environment(self, cdi_ids: Iterable[str]) -> dict[str, str]:
        """The variables a container created with ``cdi_ids`` gets, as the runtime injects
        them; UnresolvableDevices (with the refused files' reasons) if any cannot be found."""
        by_kind, refused = self.specs()
        entries: list[str] = []
        unresolvable = []
        for cdi_id in cdi_ids:
            kind, equals, name = cdi_id.partition("=")
            spec = by_kind.get(kind)
            if not equals or spec is None or name not in spec.devices:
                unresolvable.append(cdi_id)
                continue
            entries += spec.devices[name]
        if unresolvable:
            reasons = "; ".join(f"{path.name}: {reason}" for path, reason in refused.items())
            raise UnresolvableDevices(
                f"unresolvable CDI devices {', '.join(unresolvable)}"
                + (f" (refused specs: {reasons})" if reasons else "")
            )
        return dict(entry.split("=", 1) for entry in entries)


def _spec_files(directory: Path) -> Iterable[Path]:
    if not directory.is_dir():
        return ()
    return (
        path for path in directory.iterdir() if path.suffix in (".json", ".yaml") and path.is_file()
    )


def _merged(first: SpecFile, second: SpecFile) -> SpecFile:
    """Two files of one kind: their devices together (a name in both is a conflict, which the
    library resolves by directory priority, and refuses within one directory)."""
    clash = set(first.devices) & set(second.devices)
    if clash and first.path.parent == second.path.parent:
        raise UnresolvableDevices(f"conflicting CDI devices {sorted(clash)} in {first.path.parent}")
    return SpecFile(second.path, first.kind, {**first.devices, **second.devices})
