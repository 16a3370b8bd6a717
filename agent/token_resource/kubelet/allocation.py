"""Who holds the tokens, as the kubelet sees it: one read of its PodResources API.

Read on demand only (``status``, metrics) and with a short timeout: serving never waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from token_resource._compat import within
from token_resource.observe.report import Holder
from token_resource.protocol import podresources_pb2 as pb
from token_resource.protocol.podresources import GET_ALLOCATABLE_RESOURCES, LIST

# The kubelet answers from memory; longer means it is stuck, and status must not be.
READ_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class Allocation:
    # Resource name -> the containers holding its tokens, by namespace, pod and container.
    holders: Mapping[str, tuple[Holder, ...]]
    # Resource name -> devices the kubelet counts as allocatable; None where the kubelet does
    # not offer GetAllocatableResources (before 1.21, or the feature gate off).
    allocatable: Mapping[str, int] | None


class AllocationUnknown(Exception):
    """The kubelet could not tell (no socket, refused, too slow); the text says why."""


async def read_allocation(
    socket: Path, resources: Collection[str], timeout: float = READ_TIMEOUT_SECONDS
) -> Allocation:
    """The allocations of ``resources`` (other resources are left out), both calls within
    ``timeout`` together; or AllocationUnknown."""
    try:
        return await within(_read(socket, frozenset(resources)), timeout)
    except asyncio.TimeoutError:
        raise AllocationUnknown(
            f"the kubelet's PodResources API at {socket} did not answer within {timeout:g} s"
        ) from None


async def _read(socket: Path, resources: frozenset[str]) -> Allocation:
    if not socket.is_socket():  # noqa: ASYNC240 (one stat of a local path)
        raise AllocationUnknown(
            f"no PodResources socket at {socket} (a kubelet without the API, or another path)"
        )
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        list_pods = channel.unary_unary(
            LIST,
            request_serializer=pb.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pb.ListPodResourcesResponse.FromString,
        )
        get_allocatable = channel.unary_unary(
            GET_ALLOCATABLE_RESOURCES,
            request_serializer=pb.AllocatableResourcesRequest.SerializeToString,
            response_deserializer=pb.AllocatableResourcesResponse.FromString,
        )
        try:
            pods = await list_pods(pb.ListPodResourcesRequest())
            try:
                allocatable = await get_allocatable(pb.AllocatableResourcesRequest())
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                error.__traceback__ = None  # as a failed Register's (registration.py)
                allocatable = None
        except grpc.aio.AioRpcError as error:
            error.__traceback__ = None
            raise AllocationUnknown(
                f"the kubelet's PodResources API at {socket} did not answer: "
                f"{error.code().name}: {error.details()}"
            ) from None
    return Allocation(
        _holders(pods, resources),
        None if allocatable is None else _allocatable(allocatable, resources),
    )


def _holders(
    response: pb.ListPodResourcesResponse, resources: frozenset[str]
) -> dict[str, tuple[Holder, ...]]:
    # One container may get several entries for one resource (one per NUMA node): merged.
    held: dict[tuple[str, str, str, str], list[str]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name in resources:
                    key = (devices.resource_name, pod.namespace, pod.name, container.name)
                    held.setdefault(key, []).extend(devices.device_ids)
    holders: dict[str, list[Holder]] = {}
    for (resource, namespace, pod_name, container_name), ids in sorted(held.items()):
        holder = Holder(namespace, pod_name, container_name, tuple(ids))
        holders.setdefault(resource, []).append(holder)
    return {resource: tuple(entries) for resource, entries in holders.items()}


def _allocatable(
    response: pb.AllocatableResourcesResponse, resources: frozenset[str]
) -> dict[str, int]:
    ids: dict[str, set[str]] = {}
    for devices in response.devices:
        if devices.resource_name in resources:
            ids.setdefault(devices.resource_name, set()).update(devices.device_ids)
    return {resource: len(device_ids) for resource, device_ids in sorted(ids.items())}
