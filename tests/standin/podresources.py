"""The kubelet stand-in's PodResources API: who was admitted with which devices.

A real kubelet's device manager remembers every allocation (in its checkpoint, which survives
kubelet restarts) and serves them, by pod and container, on the PodResources socket. This
part of the stand-in does the same beside a :class:`KubeletStandin`: :meth:`admit_pod` picks
free healthy devices as the kubelet would, asks the plugin to Allocate them through the
kubelet's connection, and records them; ``List`` and ``GetAllocatableResources`` then answer
from that record and from what the plugins advertise. The record outlives :meth:`restart`
and the kubelet stand-in's own restarts, like the checkpoint.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from tests.standin.kubelet import KubeletStandin
from token_resource.protocol import podresources_pb2 as pb
from token_resource.protocol.deviceplugin import HEALTHY
from token_resource.protocol.podresources import pod_resources_handler

POD_RESOURCES_SOCKET = "kubelet.sock"
_WORKERS = 4


@dataclass(frozen=True)
class Admitted:
    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


class PodResourcesStandin:
    """``v1.PodResourcesLister`` on ``<directory>/kubelet.sock``.

    ``allocatable_api=False`` models a kubelet before 1.21: ``GetAllocatableResources`` is
    not served (UNIMPLEMENTED), ``List`` is.
    """

    def __init__(
        self, kubelet: KubeletStandin, directory: Path, *, allocatable_api: bool = True
    ) -> None:
        self.kubelet = kubelet
        self.socket_path = directory / POD_RESOURCES_SOCKET
        self._allocatable_api = allocatable_api
        self._lock = threading.Lock()
        self._admitted: list[Admitted] = []  # the checkpoint: kept across restarts
        self._server: grpc.Server | None = None

    def __enter__(self) -> PodResourcesStandin:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        allocatable = self._get_allocatable_resources if self._allocatable_api else None
        server = grpc.server(
            ThreadPoolExecutor(_WORKERS, thread_name_prefix="pod-resources"),
            handlers=[pod_resources_handler(self._list, allocatable)],
        )
        if not server.add_insecure_port(f"unix:{self.socket_path}"):
            raise RuntimeError(f"cannot serve on {self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(None).wait()
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    def restart(self) -> None:
        """A kubelet restart: a new socket, the same allocations (from the checkpoint)."""
        self.stop()
        self.start()

    # --- admission, as the kubelet does it ------------------------------------------------

    def admit_pod(
        self, namespace: str, pod: str, container: str, resource: str, count: int
    ) -> tuple[str, ...]:
        """Pick ``count`` healthy devices nobody holds, Allocate them, record them; the IDs.

        LookupError when there are not enough free devices (the pod would fail admission).
        """
        view = self.kubelet.snapshot().resources[resource]
        held = {
            device
            for entry in self.admitted()
            if entry.resource == resource
            for device in entry.device_ids
        }
        free = [d for d, health in view.devices if health == HEALTHY and d not in held]
        if len(free) < count:
            raise LookupError(f"{resource}: {count} wanted, {len(free)} free")
        device_ids = tuple(free[:count])
        self.kubelet.allocate(resource, device_ids)
        self.record(Admitted(namespace, pod, container, resource, device_ids))
        return device_ids

    def record(self, entry: Admitted) -> None:
        """Remember an allocation without a plugin (another vendor's devices, say)."""
        with self._lock:
            self._admitted.append(entry)

    def remove_pod(self, namespace: str, pod: str) -> None:
        """The pod ended: the kubelet forgets its devices."""
        with self._lock:
            self._admitted = [e for e in self._admitted if (e.namespace, e.pod) != (namespace, pod)]

    def admitted(self) -> list[Admitted]:
        with self._lock:
            return list(self._admitted)

    # --- the API -----------------------------------------------------------------------

    def _list(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        response = pb.ListPodResourcesResponse()
        containers: dict[tuple[str, str, str], pb.ContainerResources] = {}
        pods: dict[tuple[str, str], pb.PodResources] = {}
        for entry in self.admitted():
            pod_key = (entry.namespace, entry.pod)
            if pod_key not in pods:
                pods[pod_key] = response.pod_resources.add(
                    name=entry.pod, namespace=entry.namespace
                )
            container_key = (*pod_key, entry.container)
            if container_key not in containers:
                containers[container_key] = pods[pod_key].containers.add(name=entry.container)
            containers[container_key].devices.add(
                resource_name=entry.resource, device_ids=entry.device_ids
            )
        return response

    def _get_allocatable_resources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        """One entry per healthy device of every connected plugin, as the real kubelet sends."""
        response = pb.AllocatableResourcesResponse()
        for name, view in self.kubelet.snapshot().resources.items():
            if view.stream_open:
                for device_id, health in view.devices:
                    if health == HEALTHY:
                        response.devices.add(resource_name=name, device_ids=[device_id])
        return response
