"""Our plugin-registration and DRA definitions against the wire facts, field by field.

The tables are transcribed by hand from the project's DRA notes (../shared/docs/dra.md: the
kubelet's pluginregistration and DRA v1/v1beta1 APIs): a wrong number or type here is a silent
incompatibility only a real kubelet would reveal.
"""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2

from token_resource.protocol import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_pb2
from token_resource.protocol.descriptor import ProtoFile
from token_resource.protocol.dra import SUPPORTED_VERSIONS, health_method, method
from token_resource.protocol.dra_descriptor import FILE_V1, FILE_V1BETA1
from token_resource.protocol.dra_health_descriptor import FILE_V1 as FILE_HEALTH_V1
from token_resource.protocol.dra_health_descriptor import FILE_V1ALPHA1 as FILE_HEALTH_V1ALPHA1
from token_resource.protocol.pluginregistration import (
    DRA_PLUGIN_TYPE,
    GET_INFO,
    NOTIFY_REGISTRATION_STATUS,
)
from token_resource.protocol.pluginregistration_descriptor import FILE as REGISTRATION

REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
# message -> (name, number, type, label); a message-typed field's type is the message, a map's
# is "map<value>".
REGISTRATION_FACTS: dict[str, list[tuple[str, int, str, int]]] = {
    "InfoRequest": [],
    "PluginInfo": [
        ("type", 1, "string", OPTIONAL),
        ("name", 2, "string", OPTIONAL),
        ("endpoint", 3, "string", OPTIONAL),
        ("supported_versions", 4, "string", REPEATED),
    ],
    "RegistrationStatus": [
        ("plugin_registered", 1, "bool", OPTIONAL),
        ("error", 2, "string", OPTIONAL),
    ],
    "RegistrationStatusResponse": [],
}
DRA_FACTS: dict[str, list[tuple[str, int, str, int]]] = {
    "NodePrepareResourcesRequest": [("claims", 1, "Claim", REPEATED)],
    "NodePrepareResourcesResponse": [("claims", 1, "map<NodePrepareResourceResponse>", REPEATED)],
    "NodePrepareResourceResponse": [
        ("devices", 1, "Device", REPEATED),
        ("error", 2, "string", OPTIONAL),
    ],
    # share_id (5, v1 only) is left out on purpose: see dra_v1.proto.
    "Device": [
        ("request_names", 1, "string", REPEATED),
        ("pool_name", 2, "string", OPTIONAL),
        ("device_name", 3, "string", OPTIONAL),
        ("cdi_device_ids", 4, "string", REPEATED),
    ],
    "NodeUnprepareResourcesRequest": [("claims", 1, "Claim", REPEATED)],
    "NodeUnprepareResourcesResponse": [
        ("claims", 1, "map<NodeUnprepareResourceResponse>", REPEATED)
    ],
    "NodeUnprepareResourceResponse": [("error", 1, "string", OPTIONAL)],
    "Claim": [
        ("namespace", 1, "string", OPTIONAL),
        ("uid", 2, "string", OPTIONAL),
        ("name", 3, "string", OPTIONAL),
    ],
}
# The health service (../shared/docs/dra.md, "The health service"); health is the enum
# HealthStatus (UNKNOWN 0, HEALTHY 1, UNHEALTHY 2).
HEALTH_FACTS: dict[str, list[tuple[str, int, str, int]]] = {
    "NodeWatchResourcesRequest": [],
    "DeviceIdentifier": [
        ("pool_name", 1, "string", OPTIONAL),
        ("device_name", 2, "string", OPTIONAL),
    ],
    "DeviceHealth": [
        ("device", 1, "DeviceIdentifier", OPTIONAL),
        ("health", 2, "HealthStatus", OPTIONAL),
        ("last_updated_time", 3, "int64", OPTIONAL),
        ("health_check_timeout_seconds", 4, "int64", OPTIONAL),
        ("message", 5, "string", OPTIONAL),
    ],
    "NodeWatchResourcesResponse": [("devices", 1, "DeviceHealth", REPEATED)],
}
_SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
}


def fields_of(
    file: descriptor_pb2.FileDescriptorProto,
) -> dict[str, list[tuple[str, int, str, int]]]:
    found = {}
    for message in file.message_type:
        entries = {nested.name: nested for nested in message.nested_type}
        rows = []
        for field in message.field:
            kind = _SCALARS.get(field.type) or field.type_name.rsplit(".", 1)[-1]
            if kind in entries and entries[kind].options.map_entry:
                key, value = entries[kind].field
                assert (key.name, key.type) == (
                    "key",
                    descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                )
                kind = f"map<{value.type_name.rsplit('.', 1)[-1]}>"
            rows.append((field.name, field.number, kind, int(field.label)))
        found[message.name] = rows
    return found


def test_plugin_registration_matches_the_wire_facts() -> None:
    proto = REGISTRATION.file_descriptor_proto()
    assert proto.package == "pluginregistration"
    assert fields_of(proto) == REGISTRATION_FACTS
    assert GET_INFO == "/pluginregistration.Registration/GetInfo"
    assert NOTIFY_REGISTRATION_STATUS == "/pluginregistration.Registration/NotifyRegistrationStatus"
    assert DRA_PLUGIN_TYPE == "DRAPlugin"


@pytest.mark.parametrize("file", [FILE_V1, FILE_V1BETA1], ids=["v1", "v1beta1"])
def test_dra_matches_the_wire_facts(file: ProtoFile) -> None:
    proto = file.file_descriptor_proto()
    assert fields_of(proto) == DRA_FACTS
    [service] = proto.service
    assert service.name == "DRAPlugin"
    assert [(m.name, m.server_streaming) for m in service.method] == [
        ("NodePrepareResources", False),
        ("NodeUnprepareResources", False),
    ]


@pytest.mark.parametrize(
    ("file", "package"), [(FILE_HEALTH_V1ALPHA1, "v1alpha1"), (FILE_HEALTH_V1, "v1")]
)
def test_the_health_service_matches_the_wire_facts(file: ProtoFile, package: str) -> None:
    proto = file.file_descriptor_proto()
    assert proto.package == package
    assert fields_of(proto) == HEALTH_FACTS
    [enum] = proto.enum_type
    assert (enum.name, [(v.name, v.number) for v in enum.value]) == (
        "HealthStatus",
        [("UNKNOWN", 0), ("HEALTHY", 1), ("UNHEALTHY", 2)],
    )
    [service] = proto.service
    assert service.name == "DRAResourceHealth"
    assert [(m.name, m.server_streaming) for m in service.method] == [("NodeWatchResources", True)]
    assert health_method(f"{package}.DRAResourceHealth") == (
        f"/{package}.DRAResourceHealth/NodeWatchResources"
    )


def test_method_paths_and_version_names() -> None:
    # The DRAPlugin versions first: a kubelet takes the first one it speaks.
    assert SUPPORTED_VERSIONS == ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth")
    assert (
        method("v1.DRAPlugin", "NodePrepareResources")
        == "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
    )
    assert (
        method("v1beta1.DRAPlugin", "NodeUnprepareResources")
        == "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources"
    )


def test_v1_and_v1beta1_messages_are_the_same_bytes() -> None:
    # One servicer built on the v1 classes answers both versions.
    claim = {"namespace": "default", "uid": "4b1c", "name": "pod-0-extended-resources-x"}
    device = {
        "request_names": ["container-0-request-0"],
        "pool_name": "node-1-example.com-token",
        "device_name": "token-3",
        "cdi_device_ids": ["tokens.example.com/token=4b1c"],
    }
    v1 = dra_v1_pb2.NodePrepareResourcesResponse()
    v1.claims["4b1c"].devices.add(**device)
    beta = dra_v1beta1_pb2.NodePrepareResourcesResponse()
    beta.claims["4b1c"].devices.add(**device)
    assert v1.SerializeToString() == beta.SerializeToString()
    request = dra_v1beta1_pb2.NodePrepareResourcesRequest(claims=[claim])
    read = dra_v1_pb2.NodePrepareResourcesRequest.FromString(request.SerializeToString())
    assert (read.claims[0].uid, read.claims[0].name) == ("4b1c", claim["name"])


def test_known_bytes_decode_as_the_kubelet_sends_them() -> None:
    # PluginInfo{type: "DRAPlugin", name: "t.io", endpoint: "/p", supported_versions: ["v1"]}
    wire = b"\x0a\x09DRAPlugin\x12\x04t.io\x1a\x02/p\x22\x02v1"
    info = pluginregistration_pb2.PluginInfo.FromString(wire)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", "t.io", "/p")
    assert list(info.supported_versions) == ["v1"]
    assert info.SerializeToString() == wire
    # NodeUnprepareResourcesResponse{claims: {"u": {error: "e"}}}: a map entry is a nested
    # message with the key in field 1 and the value in field 2.
    wire = b"\x0a\x08\x0a\x01u\x12\x03\x0a\x01e"
    response = dra_v1_pb2.NodeUnprepareResourcesResponse.FromString(wire)
    assert response.claims["u"].error == "e"
    assert response.SerializeToString() == wire
