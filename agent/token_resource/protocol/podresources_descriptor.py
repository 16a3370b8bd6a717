"""The kubelet's PodResources v1 protocol (podresources.proto) as a descriptor: see
``descriptor``; the field facts are in docs/podresources-v1.md."""

from __future__ import annotations

from token_resource.protocol.descriptor import (
    INT64,
    REPEATED,
    STRING,
    UINT64,
    Field,
    Method,
    ProtoFile,
)

# message -> [(number, name, type or message name, "repeated" / None)], as in the .proto.
MESSAGES: dict[str, list[Field]] = {
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [
        (1, "devices", "ContainerDevices", REPEATED),
        (2, "cpu_ids", INT64, REPEATED),
        (3, "memory", "ContainerMemory", REPEATED),
    ],
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [(1, "pod_resources", "PodResources", REPEATED)],
    "PodResources": [
        (1, "name", STRING, None),
        (2, "namespace", STRING, None),
        (3, "containers", "ContainerResources", REPEATED),
    ],
    "ContainerResources": [
        (1, "name", STRING, None),
        (2, "devices", "ContainerDevices", REPEATED),
        (3, "cpu_ids", INT64, REPEATED),
        (4, "memory", "ContainerMemory", REPEATED),
        (5, "dynamic_resources", "DynamicResource", REPEATED),
    ],
    "ContainerMemory": [
        (1, "memory_type", STRING, None),
        (2, "size", UINT64, None),
        (3, "topology", "TopologyInfo", None),
    ],
    "ContainerDevices": [
        (1, "resource_name", STRING, None),
        (2, "device_ids", STRING, REPEATED),
        (3, "topology", "TopologyInfo", None),
    ],
    "TopologyInfo": [(1, "nodes", "NUMANode", REPEATED)],
    "NUMANode": [(1, "ID", INT64, None)],
    "DynamicResource": [
        (2, "claim_name", STRING, None),
        (3, "claim_namespace", STRING, None),
        (4, "claim_resources", "ClaimResource", REPEATED),
    ],
    "ClaimResource": [
        (1, "cdi_devices", "CDIDevice", REPEATED),
        (2, "driver_name", STRING, None),
        (3, "pool_name", STRING, None),
        (4, "device_name", STRING, None),
    ],
    "CDIDevice": [(1, "name", STRING, None)],
    "GetPodResourcesRequest": [
        (1, "pod_name", STRING, None),
        (2, "pod_namespace", STRING, None),
    ],
    "GetPodResourcesResponse": [(1, "pod_resources", "PodResources", None)],
}

SERVICES: dict[str, list[Method]] = {
    "PodResourcesLister": [
        ("List", "ListPodResourcesRequest", "ListPodResourcesResponse", False),
        (
            "GetAllocatableResources",
            "AllocatableResourcesRequest",
            "AllocatableResourcesResponse",
            False,
        ),
        ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse", False),
    ],
}

FILE = ProtoFile(
    "token_resource/protocol/podresources.proto",
    "v1",
    MESSAGES,
    SERVICES,
    # DynamicResource's field 1 (its old container name) is reserved upstream.
    reserved={"DynamicResource": [1]},
)
