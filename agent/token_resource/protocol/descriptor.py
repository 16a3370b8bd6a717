"""Protocol messages as descriptors, and their classes built from them at import time.

Each ``.proto`` of the package is the readable source; a ``ProtoFile`` states the same messages
as a ``FileDescriptorProto`` and lets the installed protobuf runtime make the classes. Code that
protoc generates only loads on the runtimes of its own era (protoc 3.21's needs protobuf >= 3.20;
older generators' is refused by protobuf >= 4), whereas a descriptor loads on every runtime
from RHEL 9's 3.14 to 7.x. ``tests/protocol/test_protocol.py`` checks that each descriptor is
exactly the one protoc makes of its .proto (``make proto`` writes protoc's version to compare with).
The ``*_pb2`` modules hold the classes under their usual names, typed by protoc's ``.pyi``
stubs (also from ``make proto``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FDP = descriptor_pb2.FieldDescriptorProto
STRING, BOOL, INT32, INT64, UINT64, MESSAGE, ENUM = (
    _FDP.TYPE_STRING,
    _FDP.TYPE_BOOL,
    _FDP.TYPE_INT32,
    _FDP.TYPE_INT64,
    _FDP.TYPE_UINT64,
    _FDP.TYPE_MESSAGE,
    _FDP.TYPE_ENUM,
)
REPEATED, MAP = "repeated", "map"

# A field: (number, name, a scalar type or the name of a message or enum, "repeated" / "map" /
# None).
Field = tuple[
    int, str, Union["descriptor_pb2.FieldDescriptorProto.Type.ValueType", str], Optional[str]
]
# A method: (name, request, response, server streaming).
Method = tuple[str, str, str, bool]


@dataclass(frozen=True)
class ProtoFile:
    """One .proto file: its messages and services in the .proto's order."""

    name: str
    package: str
    messages: dict[str, list[Field]]
    services: dict[str, list[Method]]
    # message -> field numbers the .proto reserves
    reserved: dict[str, list[int]] = field(default_factory=dict)
    # enum -> its values, (name, number) in the .proto's order (top-level enums, declared
    # before the messages)
    enums: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def file_descriptor_proto(self) -> descriptor_pb2.FileDescriptorProto:
        """The .proto file as protoc describes it."""
        return _file_descriptor_proto(self)

    def message_classes(self) -> dict[str, Any]:
        """Every message class of the file, by name."""
        # A pool of its own: nothing else in the process can clash with the package's names.
        # (Any: the stubs leave the pool's methods untyped.)
        pool: Any = descriptor_pool.DescriptorPool()
        pool.AddSerializedFile(self.file_descriptor_proto().SerializeToString())
        file = pool.FindFileByName(self.name)
        get_class = getattr(message_factory, "GetMessageClass", None)
        if get_class is None:
            # protobuf < 3.20 (RHEL 9 has 3.14): the factory object's API, removed in protobuf 5.
            get_class = getattr(message_factory.MessageFactory(pool), "GetPrototype")  # noqa: B009
        return {name: get_class(file.message_types_by_name[name]) for name in self.messages}


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


def _file_descriptor_proto(file: ProtoFile) -> descriptor_pb2.FileDescriptorProto:
    package = file.package
    proto = descriptor_pb2.FileDescriptorProto(name=file.name, package=package, syntax="proto3")
    for name, values in file.enums.items():
        enum = proto.enum_type.add(name=name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    _add_messages(proto, file)
    _add_services(proto, file)
    return proto


def _add_messages(proto: descriptor_pb2.FileDescriptorProto, file: ProtoFile) -> None:
    package = file.package
    for name, fields in file.messages.items():
        message = proto.message_type.add(name=name)
        for number, field_name, kind, label in fields:
            if label == MAP:
                # A map is a repeated field of a nested key/value message, named as protoc does.
                entry_name = _json_name(field_name)
                entry_name = entry_name[:1].upper() + entry_name[1:] + "Entry"
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                _add_field(entry, 1, "key", STRING)
                if isinstance(kind, str):
                    _add_field(entry, 2, "value", MESSAGE, f".{package}.{kind}")
                else:
                    _add_field(entry, 2, "value", kind)
                type_name = f".{package}.{name}.{entry_name}"
                field = _add_field(message, number, field_name, MESSAGE, type_name)
            elif isinstance(kind, str):
                type_of = ENUM if kind in file.enums else MESSAGE
                field = _add_field(message, number, field_name, type_of, f".{package}.{kind}")
            else:
                field = _add_field(message, number, field_name, kind)
            if label is not None:
                field.label = _FDP.LABEL_REPEATED
        for number in file.reserved.get(name, []):
            message.reserved_range.add(start=number, end=number + 1)


def _add_services(proto: descriptor_pb2.FileDescriptorProto, file: ProtoFile) -> None:
    package = file.package
    for service_name, methods in file.services.items():
        service = proto.service.add(name=service_name)
        for method_name, request, response, streaming in methods:
            method = service.method.add(
                name=method_name,
                input_type=f".{package}.{request}",
                output_type=f".{package}.{response}",
            )
            method.options.SetInParent()  # the .proto's `{}` after each rpc
            if streaming:
                method.server_streaming = True
