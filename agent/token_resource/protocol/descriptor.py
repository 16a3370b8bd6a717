"""The deviceplugin v1beta1 messages as a descriptor, and their classes built from it.

``deviceplugin.proto`` is the readable source; this module states the same messages as a
``FileDescriptorProto`` and lets the installed protobuf runtime make the classes. Code that
protoc generates only loads on the runtimes of its own era (protoc 3.21's needs protobuf >= 3.20;
older generators' is refused by protobuf >= 4), whereas a descriptor loads on every runtime
from RHEL 9's 3.14 to 7.x. ``tests/test_protocol.py`` checks that this descriptor is exactly
the one protoc makes of the .proto (``make proto`` writes protoc's version to compare with).
``deviceplugin_pb2`` holds the classes under their usual names, typed by protoc's
``deviceplugin_pb2.pyi`` (also from ``make proto``).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

FILE_NAME = "token_resource/protocol/deviceplugin.proto"
PACKAGE = "v1beta1"

_FDP = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _INT32, _INT64, _MESSAGE = (
    _FDP.TYPE_STRING,
    _FDP.TYPE_BOOL,
    _FDP.TYPE_INT32,
    _FDP.TYPE_INT64,
    _FDP.TYPE_MESSAGE,
)
_REPEATED, _MAP = "repeated", "map"

# message -> [(number, name, type or message name, "repeated" / "map" / None)], as in the .proto
# and in the protocol notes (the mixed spellings are the kubelet's).
# A field's type is a scalar type or the name of a message.
MESSAGES: dict[
    str, list[tuple[int, str, descriptor_pb2.FieldDescriptorProto.Type.ValueType | str, str | None]]
] = {
    "Empty": [],
    "DevicePluginOptions": [
        (1, "pre_start_required", _BOOL, None),
        (2, "get_preferred_allocation_available", _BOOL, None),
    ],
    "RegisterRequest": [
        (1, "version", _STRING, None),
        (2, "endpoint", _STRING, None),
        (3, "resource_name", _STRING, None),
        (4, "options", "DevicePluginOptions", None),
    ],
    "ListAndWatchResponse": [(1, "devices", "Device", _REPEATED)],
    "NUMANode": [(1, "ID", _INT64, None)],
    "TopologyInfo": [(1, "nodes", "NUMANode", _REPEATED)],
    "Device": [
        (1, "ID", _STRING, None),
        (2, "health", _STRING, None),
        (3, "topology", "TopologyInfo", None),
    ],
    "PreStartContainerRequest": [(1, "devices_ids", _STRING, _REPEATED)],
    "PreStartContainerResponse": [],
    "ContainerPreferredAllocationRequest": [
        (1, "available_deviceIDs", _STRING, _REPEATED),
        (2, "must_include_deviceIDs", _STRING, _REPEATED),
        (3, "allocation_size", _INT32, None),
    ],
    "PreferredAllocationRequest": [
        (1, "container_requests", "ContainerPreferredAllocationRequest", _REPEATED)
    ],
    "ContainerPreferredAllocationResponse": [(1, "deviceIDs", _STRING, _REPEATED)],
    "PreferredAllocationResponse": [
        (1, "container_responses", "ContainerPreferredAllocationResponse", _REPEATED)
    ],
    "ContainerAllocateRequest": [(1, "devices_ids", _STRING, _REPEATED)],
    "AllocateRequest": [(1, "container_requests", "ContainerAllocateRequest", _REPEATED)],
    "Mount": [
        (1, "container_path", _STRING, None),
        (2, "host_path", _STRING, None),
        (3, "read_only", _BOOL, None),
    ],
    "DeviceSpec": [
        (1, "container_path", _STRING, None),
        (2, "host_path", _STRING, None),
        (3, "permissions", _STRING, None),
    ],
    "CDIDevice": [(1, "name", _STRING, None)],
    "ContainerAllocateResponse": [
        (1, "envs", _STRING, _MAP),
        (2, "mounts", "Mount", _REPEATED),
        (3, "devices", "DeviceSpec", _REPEATED),
        (4, "annotations", _STRING, _MAP),
        (5, "cdi_devices", "CDIDevice", _REPEATED),
    ],
    "AllocateResponse": [(1, "container_responses", "ContainerAllocateResponse", _REPEATED)],
}

# service -> [(method, request, response, server streaming)]
SERVICES: dict[str, list[tuple[str, str, str, bool]]] = {
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


def _json_name(name: str) -> str:
    """protoc's default JSON name: underscores dropped, the letter after each one upper-cased."""
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


def _add_field(
    message: descriptor_pb2.DescriptorProto,
    number: int,
    name: str,
    kind: descriptor_pb2.FieldDescriptorProto.Type.ValueType,
    type_name: str = "",
) -> descriptor_pb2.FieldDescriptorProto:
    field = message.field.add(name=name, number=number, json_name=_json_name(name))
    field.label = _FDP.LABEL_OPTIONAL
    field.type = kind
    if type_name:
        field.type_name = type_name
    return field


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The .proto file as protoc describes it."""
    proto = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    for name, fields in MESSAGES.items():
        message = proto.message_type.add(name=name)
        for number, field_name, kind, label in fields:
            if label == _MAP:
                # A map is a repeated field of a nested key/value message, named as protoc does.
                entry_name = _json_name(field_name)
                entry_name = entry_name[:1].upper() + entry_name[1:] + "Entry"
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                _add_field(entry, 1, "key", _STRING)
                assert not isinstance(kind, str), "map values are scalars here"
                _add_field(entry, 2, "value", kind)
                type_name = f".{PACKAGE}.{name}.{entry_name}"
                field = _add_field(message, number, field_name, _MESSAGE, type_name)
            elif isinstance(kind, str):
                field = _add_field(message, number, field_name, _MESSAGE, f".{PACKAGE}.{kind}")
            else:
                field = _add_field(message, number, field_name, kind)
            if label is not None:
                field.label = _FDP.LABEL_REPEATED
    for service_name, methods in SERVICES.items():
        service = proto.service.add(name=service_name)
        for method_name, request, response, streaming in methods:
            method = service.method.add(
                name=method_name,
                input_type=f".{PACKAGE}.{request}",
                output_type=f".{PACKAGE}.{response}",
            )
            method.options.SetInParent()  # the .proto's `{}` after each rpc
            if streaming:
                method.server_streaming = True
    return proto


def message_classes() -> dict[str, Any]:
    """Every message class of the file, by name."""
    # A pool of our own: nothing else in the process can clash with the v1beta1 names.
    # (Any: the stubs leave the pool's methods untyped.)
    pool: Any = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file_descriptor_proto().SerializeToString())
    file = pool.FindFileByName(FILE_NAME)
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:
        # protobuf < 3.20 (RHEL 9 has 3.14): the factory object's API, removed in protobuf 5.
        get_class = getattr(message_factory.MessageFactory(pool), "GetPrototype")  # noqa: B009
    return {name: get_class(file.message_types_by_name[name]) for name in MESSAGES}
