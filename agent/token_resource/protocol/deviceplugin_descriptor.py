"""The deviceplugin v1beta1 protocol (deviceplugin.proto) as a descriptor: see ``descriptor``."""

from __future__ import annotations

from token_resource.protocol.descriptor import (
    BOOL,
    INT32,
    INT64,
    MAP,
    REPEATED,
    STRING,
    Field,
    Method,
    ProtoFile,
)

# message -> [(number, name, type or message name, "repeated" / "map" / None)], as in the .proto
# and in the protocol notes (the mixed spellings are the kubelet's).
# A field's type is a scalar type or the name of a message.
MESSAGES: dict[str, list[Field]] = {
    "Empty": [],
    "DevicePluginOptions": [
        (1, "pre_start_required", BOOL, None),
        (2, "get_preferred_allocation_available", BOOL, None),
    ],
    "RegisterRequest": [
        (1, "version", STRING, None),
        (2, "endpoint", STRING, None),
        (3, "resource_name", STRING, None),
        (4, "options", "DevicePluginOptions", None),
    ],
    "ListAndWatchResponse": [(1, "devices", "Device", REPEATED)],
    "NUMANode": [(1, "ID", INT64, None)],
    "TopologyInfo": [(1, "nodes", "NUMANode", REPEATED)],
    "Device": [
        (1, "ID", STRING, None),
        (2, "health", STRING, None),
        (3, "topology", "TopologyInfo", None),
    ],
    "PreStartContainerRequest": [(1, "devices_ids", STRING, REPEATED)],
    "PreStartContainerResponse": [],
    "ContainerPreferredAllocationRequest": [
        (1, "available_deviceIDs", STRING, REPEATED),
        (2, "must_include_deviceIDs", STRING, REPEATED),
        (3, "allocation_size", INT32, None),
    ],
    "PreferredAllocationRequest": [
        (1, "container_requests", "ContainerPreferredAllocationRequest", REPEATED)
    ],
    "ContainerPreferredAllocationResponse": [(1, "deviceIDs", STRING, REPEATED)],
    "PreferredAllocationResponse": [
        (1, "container_responses", "ContainerPreferredAllocationResponse", REPEATED)
    ],
    "ContainerAllocateRequest": [(1, "devices_ids", STRING, REPEATED)],
    "AllocateRequest": [(1, "container_requests", "ContainerAllocateRequest", REPEATED)],
    "Mount": [
        (1, "container_path", STRING, None),
        (2, "host_path", STRING, None),
        (3, "read_only", BOOL, None),
    ],
    "DeviceSpec": [
        (1, "container_path", STRING, None),
        (2, "host_path", STRING, None),
        (3, "permissions", STRING, None),
    ],
    "CDIDevice": [(1, "name", STRING, None)],
    "ContainerAllocateResponse": [
        (1, "envs", STRING, MAP),
        (2, "mounts", "Mount", REPEATED),
        (3, "devices", "DeviceSpec", REPEATED),
        (4, "annotations", STRING, MAP),
        (5, "cdi_devices", "CDIDevice", REPEATED),
    ],
    "AllocateResponse": [(1, "container_responses", "ContainerAllocateResponse", REPEATED)],
}

# service -> [(method, request, response, server streaming)]
SERVICES: dict[str, list[Method]] = {
    "Registration": [("Register", "RegisterRequest", "Empty", False)],
    "DevicePlugin": [
        ("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
        ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
        (
            "GetPreferredAllocation",
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
            False,
        ),
        ("Allocate", "AllocateRequest", "AllocateResponse", False),
        ("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse", False),
    ],
}

FILE = ProtoFile("token_resource/protocol/deviceplugin.proto", "v1beta1", MESSAGES, SERVICES)
