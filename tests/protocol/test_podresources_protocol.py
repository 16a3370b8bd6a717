"""Our PodResources v1 definitions against the upstream ones, field by field.

The table is transcribed by hand from kubernetes/kubernetes
``staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`` (commit 95f08499d652, the
version with ``Get`` and DRA's ``DynamicResource``): a wrong number or type here would be a
silent misreading of what a real kubelet sends.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from token_resource.protocol.podresources import (
    GET_ALLOCATABLE_RESOURCES,
    LIST,
    POD_RESOURCES_SERVICE,
)
from token_resource.protocol.podresources_descriptor import FILE

REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
# message -> (name, number, type, label); for message-typed fields, the type is the message.
UPSTREAM: dict[str, list[tuple[str, int, str, int]]] = {
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [
        ("devices", 1, "ContainerDevices", REPEATED),
        ("cpu_ids", 2, "int64", REPEATED),
        ("memory", 3, "ContainerMemory", REPEATED),
    ],
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, "PodResources", REPEATED)],
    "PodResources": [
        ("name", 1, "string", OPTIONAL),
        ("namespace", 2, "string", OPTIONAL),
        ("containers", 3, "ContainerResources", REPEATED),
    ],
    "ContainerResources": [
        ("name", 1, "string", OPTIONAL),
        ("devices", 2, "ContainerDevices", REPEATED),
        ("cpu_ids", 3, "int64", REPEATED),
        ("memory", 4, "ContainerMemory", REPEATED),
        ("dynamic_resources", 5, "DynamicResource", REPEATED),
    ],
    "ContainerMemory": [
        ("memory_type", 1, "string", OPTIONAL),
        ("size", 2, "uint64", OPTIONAL),
        ("topology", 3, "TopologyInfo", OPTIONAL),
    ],
    "ContainerDevices": [
        ("resource_name", 1, "string", OPTIONAL),
        ("device_ids", 2, "string", REPEATED),
        ("topology", 3, "TopologyInfo", OPTIONAL),
    ],
    "TopologyInfo": [("nodes", 1, "NUMANode", REPEATED)],
    "NUMANode": [("ID", 1, "int64", OPTIONAL)],
    # Number 1 (class_name) is a tombstone upstream since 1.31.
    "DynamicResource": [
        ("claim_name", 2, "string", OPTIONAL),
        ("claim_namespace", 3, "string", OPTIONAL),
        ("claim_resources", 4, "ClaimResource", REPEATED),
    ],
    "ClaimResource": [
        ("cdi_devices", 1, "CDIDevice", REPEATED),
        ("driver_name", 2, "string", OPTIONAL),
        ("pool_name", 3, "string", OPTIONAL),
        ("device_name", 4, "string", OPTIONAL),
    ],
    "CDIDevice": [("name", 1, "string", OPTIONAL)],
    "GetPodResourcesRequest": [
        ("pod_name", 1, "string", OPTIONAL),
        ("pod_namespace", 2, "string", OPTIONAL),
    ],
    "GetPodResourcesResponse": [("pod_resources", 1, "PodResources", OPTIONAL)],
}
UPSTREAM_METHODS = {
    "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
    "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
    "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
}
_SCALAR_TYPES = {
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
}


# The file as the module loads it (tests/protocol/test_protocol.py shows the two are the same,
# and the same as protoc's), read as a FileDescriptorProto: every protobuf from 3.14 on can show
# that in full, labels and streaming included, which not all expose on runtime descriptors.
PROTO = FILE.file_descriptor_proto()


def _message(name: str) -> descriptor_pb2.DescriptorProto:
    (message,) = [message for message in PROTO.message_type if message.name == name]
    return message


def _type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE:
        package, _, message = field.type_name.lstrip(".").rpartition(".")
        return message if package == "v1" else field.type_name
    return _SCALAR_TYPES.get(field.type, f"unexpected type {field.type}")


def test_every_message_and_field_matches_upstream() -> None:
    assert PROTO.package == "v1"
    ours = {
        message.name: [(f.name, f.number, _type(f), f.label) for f in message.field]
        for message in PROTO.message_type
    }
    assert ours == UPSTREAM


def test_the_tombstoned_field_number_stays_reserved() -> None:
    reserved = _message("DynamicResource").reserved_range
    assert [(numbers.start, numbers.end) for numbers in reserved] == [(1, 2)]


def test_service_and_method_paths_match_upstream() -> None:
    (service,) = PROTO.service
    assert f"{PROTO.package}.{service.name}" == POD_RESOURCES_SERVICE
    methods = {
        m.name: (m.input_type.rpartition(".")[2], m.output_type.rpartition(".")[2])
        for m in service.method
        if not m.client_streaming and not m.server_streaming
    }
    assert methods == UPSTREAM_METHODS
    assert (LIST, GET_ALLOCATABLE_RESOURCES) == (
        "/v1.PodResourcesLister/List",
        "/v1.PodResourcesLister/GetAllocatableResources",
    )
