"""The kubelet's DRA health service (dra_health_v1alpha1.proto, dra_health_v1.proto) as
descriptors: see ``descriptor``. The two versions are the same messages under two packages."""

from __future__ import annotations

from token_resource.protocol.descriptor import INT64, REPEATED, STRING, Field, Method, ProtoFile

ENUMS = {"HealthStatus": [("UNKNOWN", 0), ("HEALTHY", 1), ("UNHEALTHY", 2)]}

# message -> [(number, name, type or message / enum name, "repeated" / None)], as in the .proto.
MESSAGES: dict[str, list[Field]] = {
    "NodeWatchResourcesRequest": [],
    "DeviceIdentifier": [(1, "pool_name", STRING, None), (2, "device_name", STRING, None)],
    "DeviceHealth": [
        (1, "device", "DeviceIdentifier", None),
        (2, "health", "HealthStatus", None),
        (3, "last_updated_time", INT64, None),
        (4, "health_check_timeout_seconds", INT64, None),
        (5, "message", STRING, None),
    ],
    "NodeWatchResourcesResponse": [(1, "devices", "DeviceHealth", REPEATED)],
}

SERVICES: dict[str, list[Method]] = {
    "DRAResourceHealth": [
        ("NodeWatchResources", "NodeWatchResourcesRequest", "NodeWatchResourcesResponse", True)
    ],
}

FILE_V1ALPHA1 = ProtoFile(
    "token_resource/protocol/dra_health_v1alpha1.proto",
    "v1alpha1",
    MESSAGES,
    SERVICES,
    enums=ENUMS,
)
FILE_V1 = ProtoFile(
    "token_resource/protocol/dra_health_v1.proto", "v1", MESSAGES, SERVICES, enums=ENUMS
)
