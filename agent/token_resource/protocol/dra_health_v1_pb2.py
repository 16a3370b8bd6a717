"""The DRA health v1 message classes (see ``descriptor`` and ``dra_health_descriptor``),
under protoc's module name; typed by ``dra_health_v1_pb2.pyi``.
"""

from google.protobuf.internal import enum_type_wrapper

from token_resource.protocol.dra_health_descriptor import FILE_V1

_classes = FILE_V1.message_classes()
DESCRIPTOR = _classes["NodeWatchResourcesRequest"].DESCRIPTOR.file
HealthStatus = enum_type_wrapper.EnumTypeWrapper(DESCRIPTOR.enum_types_by_name["HealthStatus"])
UNKNOWN = HealthStatus.Value("UNKNOWN")
HEALTHY = HealthStatus.Value("HEALTHY")
UNHEALTHY = HealthStatus.Value("UNHEALTHY")
NodeWatchResourcesRequest = _classes["NodeWatchResourcesRequest"]
DeviceIdentifier = _classes["DeviceIdentifier"]
DeviceHealth = _classes["DeviceHealth"]
NodeWatchResourcesResponse = _classes["NodeWatchResourcesResponse"]
