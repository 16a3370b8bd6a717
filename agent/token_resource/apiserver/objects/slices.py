"""The ResourceSlices of DRA resources: one pool per resource, its tokens as devices; a node's
pool is bound to its node (``nodeName``), a cluster pool to every node or a selection of them.

Pure: what the slices of a pool should hold, and whether the ones the API server holds are
exactly that. A pool is written out in slices of at most 128 devices (64 when any device has a
taint, as the API server requires), all of one generation; consumers (the scheduler) use only
the slices of a pool's highest generation and expect ``resourceSliceCount`` of them, so any
change of a pool's devices is a new generation written to every one of its slices.

An unhealthy token is tainted (``<driver>/unhealthy``, NoSchedule unless its resource asks for
NoExecute), so the scheduler allocates it no more; where the API server drops taints
(DRADeviceTaints off, before 1.36), the pool leaves unhealthy tokens out instead.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from token_resource.config.model import DEVICES_PER_SLICE, NO_SCHEDULE, NodeSelection
from token_resource.config.names import token_id

API_GROUP = "resource.k8s.io"
API_VERSION = f"{API_GROUP}/v1"
SLICES_PATH = f"/apis/{API_VERSION}/resourceslices"
# Device attributes (the driver's domain is implied): which resource a device belongs to, and
# its token ID, the same as the device plugin's and the container's variable name it.
RESOURCE_ATTRIBUTE = "resource"
# The spec fields that say where a slice's devices are (exactly one is set).
PLACEMENT_FIELDS = ("nodeName", "allNodes", "nodeSelector")
TOKEN_ATTRIBUTE = "token"
# The API server's limit for a slice with any device taint (or counter consumption).
DEVICES_PER_SLICE_WITH_TAINTS = 64
# The taint of an unhealthy token: under the driver's domain.
UNHEALTHY_TAINT = "unhealthy"
_MAX_POOL_NAME = 253
_POOL_PART = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_DIGEST_CHARS = 12


def pool_name(node: str, resource: str) -> str:
    """``node-1/example.com/token``: DNS subdomains joined by "/", as pool names must be.

    The part after the domain is lower-cased, "_" made "-"; when that changed anything (or the
    name is too long) a digest of the resource name keeps pools of different names apart.
    """
    pool = f"{node}/{cluster_pool_name(resource)}"
    if len(pool) > _MAX_POOL_NAME:
        pool = f"{node[: _MAX_POOL_NAME - _DIGEST_CHARS - 1]}/{_digest(resource)}"
    return pool


def cluster_pool_name(resource: str) -> str:
    """``example.com/token``: the pool of a cluster-scoped resource, named as a node's pool
    without the node (two parts where a node's pool has three, so the two never meet)."""
    domain, _, name = resource.partition("/")
    readable = name.lower().replace("_", "-")
    if readable != name or not _valid_part(readable):
        readable = f"{_trim(readable)}-{_digest(resource)}".lstrip("-.")
    return f"{domain}/{readable}"


def _valid_part(part: str) -> bool:
    return all(_POOL_PART.fullmatch(label) for label in part.split(".")) and len(part) <= 63


def _trim(part: str) -> str:
    # Only what a DNS label keeps, and room for the digest within 63 characters.
    kept = re.sub(r"[^a-z0-9-]", "-", part)
    return kept[: 63 - _DIGEST_CHARS - 1].strip("-")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARS]


def device_class_name(resource: str) -> str:
    """``example.com/token`` → ``token.example.com``: a DeviceClass name (a DNS subdomain)."""
    domain, _, name = resource.partition("/")
    readable = name.lower().replace("_", "-")
    if readable != name or not _valid_part(readable):
        readable = f"{_trim(readable)}-{_digest(resource)}".lstrip("-.")
    return f"{readable}.{domain}"[:253]


def device_class(driver: str, resource: str) -> dict[str, Any]:
    """The DeviceClass that selects the resource's devices, by driver and attribute, and
    (Kubernetes 1.36 on) serves pods that ask for the resource by name under limits."""
    expression = (
        f"device.driver == {json.dumps(driver)} && "
        f"device.attributes[{json.dumps(driver)}].{RESOURCE_ATTRIBUTE} == {json.dumps(resource)}"
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": device_class_name(resource)},
        "spec": {
            "selectors": [{"cel": {"expression": expression}}],
            "extendedResourceName": resource,
        },
    }


def slice_name(driver: str, pool: str, index: int) -> str:
    """A name of its own for each slice of a pool, the same on every run."""
    return f"{driver}-{_digest(pool)}-{index}"


def taint_key(driver: str) -> str:
    return f"{driver}/{UNHEALTHY_TAINT}"


@dataclass(frozen=True)
class Pool:
    """What one resource's pool holds; a count of 0 is a pool of one empty slice (a pool must
    have at least one), so the scheduler sees the resource with nothing free. ``placement``:
    the slice's spec fields that say which nodes may draw from it (``nodeName``, or
    ``allNodes`` / ``nodeSelector`` for a cluster pool). ``unhealthy``: the indices of its
    unhealthy tokens, tainted with ``effect``, or left out where the API server keeps no
    ``taints``."""

    driver: str
    name: str
    placement: Mapping[str, Any]
    resource: str
    count: int
    unhealthy: frozenset[int] = frozenset()
    effect: str = NO_SCHEDULE
    taints: bool = True

    @property
    def tainted(self) -> bool:
        return self.taints and any(index < self.count for index in self.unhealthy)

    def devices(self) -> list[dict[str, Any]]:
        listed = []
        for index in range(self.count):
            device: dict[str, Any] = {
                "name": token_id(index),
                "attributes": {
                    RESOURCE_ATTRIBUTE: {"string": self.resource},
                    TOKEN_ATTRIBUTE: {"string": token_id(index)},
                },
            }
            if index in self.unhealthy:
                if not self.taints:
                    continue
                device["taints"] = [{"key": taint_key(self.driver), "effect": self.effect}]
            listed.append(device)
        return listed

    def slices(
        self, generation: int, owner: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The pool's slices at ``generation``, as objects to create (``owner``: a node pool's
        Node, so that the slices go with it)."""
        all_devices = self.devices()
        per_slice = DEVICES_PER_SLICE_WITH_TAINTS if self.tainted else DEVICES_PER_SLICE
        chunks = [
            all_devices[start : start + per_slice]
            for start in range(0, max(len(all_devices), 1), per_slice)
        ]
        metadata_extra = {"ownerReferences": [dict(owner)]} if owner else {}
        return [
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(self.driver, self.name, index), **metadata_extra},
                "spec": {
                    "driver": self.driver,
                    **self.placement,
                    "pool": {
                        "name": self.name,
                        "generation": generation,
                        "resourceSliceCount": len(chunks),
                    },
                    "devices": chunk,
                },
            }
            for index, chunk in enumerate(chunks)
        ]


def node_placement(node: str) -> dict[str, Any]:
    return {"nodeName": node}


def cluster_placement(nodes: NodeSelection | None) -> dict[str, Any]:
    """Every node (``allNodes``), or the nodes that meet every requirement of ``nodes``: a
    NodeSelector of one term, as a slice's must be."""
    if nodes is None:
        return {"allNodes": True}
    expressions = [
        {
            "key": requirement.key,
            "operator": requirement.operator,
            **({"values": list(requirement.values)} if requirement.values else {}),
        }
        for requirement in nodes.requirements
    ]
    return {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}


def cluster_scoped(spec: Mapping[str, Any]) -> bool:
    """Whether a slice's spec is of a cluster pool (for every or some nodes, not one)."""
    return bool(spec.get("allNodes")) or spec.get("nodeSelector") is not None


def node_owner(node: Mapping[str, Any]) -> dict[str, Any]:
    """An owner reference to the Node object read from the API server."""
    metadata = node.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "controller": True,
    }


def essence(item: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(name, the spec fields the agent writes) of a slice, to compare what is stored with
    what should be (the API server may add fields of its own)."""
    spec = item.get("spec") or {}
    kept = {
        "driver": spec.get("driver"),
        **{key: spec.get(key) for key in PLACEMENT_FIELDS},
        "pool": spec.get("pool"),
        "devices": [
            {
                "name": device.get("name"),
                "attributes": device.get("attributes"),
                # The API server sets timeAdded when it is left out.
                "taints": [
                    {key: taint.get(key) for key in ("key", "value", "effect")}
                    for taint in device.get("taints") or []
                ],
            }
            for device in spec.get("devices") or []
        ],
    }
    return str((item.get("metadata") or {}).get("name")), kept


def taints_kept(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """Whether the API server kept the taints of a slice it was sent (one with
    DRADeviceTaints off drops them silently)."""

    def tainted(item: Mapping[str, Any]) -> int:
        return sum(bool(d.get("taints")) for d in (item.get("spec") or {}).get("devices") or [])

    return tainted(stored) >= tainted(sent)


def generation_of(items: Iterable[Mapping[str, Any]]) -> int:
    """The highest pool generation among ``items`` (0 for none)."""
    return max(
        (
            int(((item.get("spec") or {}).get("pool") or {}).get("generation") or 0)
            for item in items
        ),
        default=0,
    )


def matches(stored: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the stored slices of a pool are exactly the wanted ones."""
    return sorted(map(_key, map(essence, stored))) == sorted(map(_key, map(essence, wanted)))


def _key(pair: tuple[str, dict[str, Any]]) -> str:
    return json.dumps(pair, sort_keys=True)
