"""What ``token-resource status`` shows: per resource its tokens, registration and holders.

The agent builds it and sends it as JSON over the control socket; the command prints that
JSON or renders it as text. The command imports only the standard library, so this does too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Holder:
    """One container and the device IDs of one resource that the kubelet allocated to it."""

    namespace: str
    pod: str
    container: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ResourceReport:
    name: str
    count: int
    advertise: str
    # None for node-status resources, which do not register.
    registered: bool | None
    # None when the kubelet could not tell (and always for node-status resources, whose
    # holders the kubelet does not list).
    holders: tuple[Holder, ...] | None
    # Devices the kubelet counts as allocatable; None when it does not say.
    kubelet_allocatable: int | None = None

    @property
    def in_use(self) -> int | None:
        """Distinct tokens held; above ``count`` after a resize below what pods hold."""
        if self.holders is None:
            return None
        return len({device_id for holder in self.holders for device_id in holder.device_ids})

    @property
    def free(self) -> int | None:
        # The scheduler admits no new pod while the held tokens reach the count.
        return None if self.in_use is None else max(self.count - self.in_use, 0)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(in_use=self.in_use, free=self.free)
        return data


@dataclass(frozen=True)
class PluginSockets:
    """Where the device-plugin sockets are: the agent's own directory, which kubelet restarts
    leave alone, or beside kubelet.sock (the fallback for a kubelet that will not take it)."""

    directory: str
    layout: str  # "subdirectory" or "top-level"


@dataclass(frozen=True)
class StatusReport:
    summary: str  # the STATUS= line
    pod_resources_socket: str
    # Why the kubelet could not tell who holds the tokens; None when it did.
    pod_resources_error: str | None
    resources: tuple[ResourceReport, ...]
    plugin_sockets: PluginSockets | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "plugin_sockets": None if self.plugin_sockets is None else asdict(self.plugin_sockets),
            "pod_resources": {
                "socket": self.pod_resources_socket,
                "error": self.pod_resources_error,
            },
            "resources": [resource.to_json() for resource in self.resources],
        }


def render_text(report: Mapping[str, Any]) -> str:
    """The report (as ``to_json`` gives it) for people: the status line, then per resource."""
    lines = [report["summary"]]
    error = report["pod_resources"]["error"]
    if error is not None:
        lines.append(f"who holds the tokens: unknown: {error}")
    for resource in report["resources"]:
        lines.append(f"{resource['name']}: {_describe(resource)}")
        lines.extend(
            f"  {holder['namespace']}/{holder['pod']}/{holder['container']}: "
            + ", ".join(holder["device_ids"])
            for holder in resource["holders"] or ()
        )
    sockets = report.get("plugin_sockets")  # absent in the answers of older agents
    if sockets is not None:
        kept = (
            "kept across kubelet restarts"
            if sockets["layout"] == "subdirectory"
            else "beside kubelet.sock: the kubelet did not take the agent's own directory"
        )
        lines.append(f"device-plugin sockets: {sockets['directory']} ({kept})")
    return "\n".join(lines)


def _describe(resource: Mapping[str, Any]) -> str:
    parts = [f"{resource['count']} token(s)"]
    if resource["registered"] is None:
        parts.append("node status (the kubelet lists no holders for these)")
    else:
        parts.append("registered" if resource["registered"] else "not registered")
    in_use, count = resource["in_use"], resource["count"]
    if in_use is not None:
        over = in_use - count
        held = f"{in_use} in use"
        if over > 0:
            held += f" ({over} more than the count: held since before it was lowered)"
        parts += [held, f"{resource['free']} free"]
    elif resource["registered"] is not None:
        parts.append("in use unknown")
    allocatable = resource["kubelet_allocatable"]
    if allocatable is not None and allocatable != count:
        parts.append(f"the kubelet counts {allocatable} allocatable")
    return ", ".join(parts)
