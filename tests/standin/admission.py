"""The kubelet stand-in's pod admission: what a starting kubelet's device manager decides.

A starting kubelet admits every pod bound to its node, about a second after it starts (it first
waits for its Node to sync). For a pod whose containers are still running (a plain kubelet
restart) the device manager has nothing to do. After a node **reboot** no container runs, and
every pod is checked afresh against the devices the plugins have reported by then: a pod whose
resource has no healthy device at that moment is rejected for good, as a Failed pod with the
reason ``UnexpectedAdmissionError`` (upstream kubernetes#125579). A device plugin that is not
registered and listing when the kubelet admits loses its pods.

The rules and error texts are the device manager's ``devicesToAllocate`` (kubelet 1.32; the
admission error wraps them as ``Allocate failed due to <error>, which is unexpected``).
Standard library only: the stand-in runs as a script inside test containers, beside the agent's
installed package.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUNNING = "Running"
FAILED = "Failed"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"

# resource name -> device IDs
Devices = Mapping[str, tuple[str, ...]]


class AdmissionError(Exception):
    """Why the device manager cannot give a pod its devices, in the kubelet's words."""


def devices_to_allocate(
    resource: str,
    required: int,
    *,
    previous: Sequence[str] | None,
    registered: bool,
    healthy: Sequence[str],
    taken: Iterable[str],
) -> tuple[str, ...]:
    """The devices to Allocate for one pod's need of ``resource``, or () when it keeps
    ``previous`` (its allocation in the checkpoint) and no Allocate call is made.

    The checks come in the kubelet's order: registration and health are looked at before the
    count (doing otherwise was kubernetes#109595), so a pod whose devices are known from the
    checkpoint is still rejected while its plugin has not reported them healthy.
    """
    if previous is not None and len(previous) != required:
        raise AdmissionError(
            f"changed request for resource {json.dumps(resource)} "
            f"from {len(previous)} to {required}"
        )
    if not registered:
        raise AdmissionError(f"cannot allocate unregistered device {resource}")
    if not healthy:
        raise AdmissionError(
            f"no healthy devices present; cannot allocate unhealthy devices {resource}"
        )
    if previous is not None:
        if not set(previous) <= set(healthy):
            raise AdmissionError(
                "previously allocated devices are no longer healthy; "
                f"cannot allocate unhealthy devices {resource}"
            )
        return ()
    busy = set(taken)
    available = [device for device in healthy if device not in busy]
    if len(available) < required:
        raise AdmissionError(
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {required}, Available: {len(available)}"
        )
    return tuple(available[:required])


def rejection_message(error: AdmissionError | str) -> str:
    """The Failed pod's message, as the kubelet writes it."""
    return f"Allocate failed due to {error}, which is unexpected"


@dataclass(frozen=True)
class PodStatus:
    """What the kubelet reported for a pod: Running with its devices, or Failed and why."""

    phase: str
    generation: int  # the stand-in generation that decided it
    at: float  # time.monotonic() of the decision
    devices: Devices = field(default_factory=dict)
    reason: str = ""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["devices"] = {name: list(ids) for name, ids in self.devices.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PodStatus:
        devices = {name: tuple(ids) for name, ids in data.get("devices", {}).items()}
        return cls(
            phase=str(data["phase"]),
            generation=int(data["generation"]),
            at=float(data["at"]),
            devices=devices,
            reason=str(data.get("reason", "")),
            message=str(data.get("message", "")),
        )


@dataclass(frozen=True)
class Pod:
    """A pod bound to the node: what it asks for, and its status as last reported."""

    name: str
    resources: Mapping[str, int]
    status: PodStatus | None = None


class PodStore:
    """The API server's pods of this node, as a JSON file the kubelet reads at every start and
    writes pod statuses back to: ``{"pods": {NAME: {"resources": {RESOURCE: COUNT}}}}``.

    Keep it on persistent storage: a Failed pod stays Failed across kubelet restarts and
    reboots, as in the API.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[Pod]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        pods = []
        for name, pod in sorted(data.get("pods", {}).items()):
            status = pod.get("status")
            pods.append(
                Pod(
                    name,
                    {resource: int(count) for resource, count in pod["resources"].items()},
                    None if status is None else PodStatus.from_dict(status),
                )
            )
        return pods

    def report(self, statuses: Mapping[str, PodStatus]) -> None:
        """Write these pods' statuses, leaving everything else in the file as it is."""
        data = json.loads(self.path.read_text())
        for name, status in statuses.items():
            data["pods"][name]["status"] = status.to_dict()
        write_atomically(self.path, json.dumps(data, indent=2, sort_keys=True))


class RuntimeState:
    """The container runtime's record of which pods' containers run: a file on a tmpfs (a
    reboot clears it, a kubelet restart does not), or, without one, this process's memory."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._running: set[str] = set()

    def running(self) -> set[str]:
        if self.path is None:
            return set(self._running)
        try:
            return set(json.loads(self.path.read_text())["running"])
        except FileNotFoundError:
            return set()

    def set_running(self, pods: Iterable[str]) -> None:
        self._running = set(pods)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps({"running": sorted(self._running)}))


@dataclass
class Checkpoint:
    """The device manager's checkpoint: the device IDs of every resource registered so far
    (also with an empty list: registered, no device known yet) and each admitted pod's."""

    registered: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pod_devices: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Checkpoint:
        """What the file holds; an empty checkpoint if it is missing or not one of ours (the
        kubelet, too, goes on after failing to read its checkpoint)."""
        try:
            data = json.loads(path.read_text())
            registered = {
                name: tuple(ids) for name, ids in data.get("registered_devices", {}).items()
            }
            pods = {
                pod: {name: tuple(ids) for name, ids in devices.items()}
                for pod, devices in data.get("pod_devices", {}).items()
            }
        except (OSError, ValueError, TypeError, AttributeError):
            return cls()
        return cls(registered, pods)

    def to_json(self, generation: int) -> str:
        return json.dumps(
            {
                "generation": generation,
                "registered_devices": {
                    name: list(ids) for name, ids in sorted(self.registered.items())
                },
                "pod_devices": {
                    pod: {name: list(ids) for name, ids in devices.items()}
                    for pod, devices in sorted(self.pod_devices.items())
                },
            }
        )

    def taken_by_others(self, pod: str, resource: str) -> set[str]:
        return {
            device
            for other, devices in self.pod_devices.items()
            if other != pod
            for device in devices.get(resource, ())
        }


def admit_pods(
    pods: Sequence[Pod],
    *,
    running: set[str],
    checkpoint: Checkpoint,
    healthy: Mapping[str, Sequence[str]],
    allocate: Callable[[str, Sequence[str]], None],
    generation: int,
    clock: Callable[[], float],
) -> dict[str, PodStatus]:
    """The kubelet's first pod sync: each pod in turn, as the device manager admits it.

    ``healthy`` holds the healthy devices of every registered resource (an empty list for one
    known only from the checkpoint); ``allocate(resource, ids)`` is the plugin's Allocate,
    raising AdmissionError. Failed pods stay as they are, and so do pods whose containers
    still run (``running``: a kubelet restart, not a reboot). Returns the new statuses, adds
    admitted pods to ``running`` and updates the checkpoint's pod devices.
    """
    decided: dict[str, PodStatus] = {}
    for pod in pods:
        if (pod.status is not None and pod.status.phase == FAILED) or pod.name in running:
            continue
        devices: dict[str, tuple[str, ...]] = {}
        try:
            for resource, count in sorted(pod.resources.items()):
                previous = checkpoint.pod_devices.get(pod.name, {}).get(resource)
                new = devices_to_allocate(
                    resource,
                    count,
                    previous=previous,
                    registered=resource in healthy,
                    healthy=healthy.get(resource, ()),
                    taken=checkpoint.taken_by_others(pod.name, resource),
                )
                if new:
                    allocate(resource, new)
                devices[resource] = new if previous is None else tuple(previous)
        except AdmissionError as error:
            checkpoint.pod_devices.pop(pod.name, None)
            decided[pod.name] = PodStatus(
                FAILED,
                generation,
                clock(),
                reason=UNEXPECTED_ADMISSION_ERROR,
                message=rejection_message(error),
            )
            continue
        checkpoint.pod_devices[pod.name] = devices
        running.add(pod.name)
        decided[pod.name] = PodStatus(RUNNING, generation, clock(), devices)
    return decided


def describe_admission(decided: Mapping[str, PodStatus]) -> list[str]:
    """One log line per pod, then the totals."""
    events = [
        f"rejected pod {name}: {status.reason}: {status.message}"
        if status.phase == FAILED
        else f"admitted pod {name}: "
        + ", ".join(f"{resource} {','.join(ids)}" for resource, ids in status.devices.items())
        for name, status in decided.items()
    ]
    failed = sum(status.phase == FAILED for status in decided.values())
    return [*events, f"pods admitted: {len(decided) - failed}, rejected: {failed}"]


def write_atomically(path: Path, text: str) -> None:
    """Readers (the demo, a container's checks) never see a half-written file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
