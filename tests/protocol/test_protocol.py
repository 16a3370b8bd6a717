"""The message classes built from a descriptor: what protoc makes of the .proto, on any runtime.

``tests/<name>.desc`` is protoc's description of ``<name>.proto`` (written by
``make proto``; ``make proto-check`` fails when it or the .pyi is stale), so these tests need no
protoc and run on every protobuf this suite runs on (RHEL 9's 3.14 to PyPI's newest).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from token_resource.protocol import (
    deviceplugin_descriptor,
    dra_descriptor,
    dra_health_descriptor,
    dra_health_v1_pb2,
    dra_health_v1alpha1_pb2,
    dra_v1_pb2,
    dra_v1beta1_pb2,
    pluginregistration_descriptor,
    pluginregistration_pb2,
    podresources_descriptor,
    podresources_pb2,
)
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.descriptor import ProtoFile

HERE = Path(__file__).parent
# Each protocol: its descriptor, its module of classes, and protoc's description of its .proto.
PROTOCOLS = {
    "deviceplugin": (deviceplugin_descriptor.FILE, pb),
    "podresources": (podresources_descriptor.FILE, podresources_pb2),
    "pluginregistration": (pluginregistration_descriptor.FILE, pluginregistration_pb2),
    "dra_v1": (dra_descriptor.FILE_V1, dra_v1_pb2),
    "dra_v1beta1": (dra_descriptor.FILE_V1BETA1, dra_v1beta1_pb2),
    "dra_health_v1alpha1": (dra_health_descriptor.FILE_V1ALPHA1, dra_health_v1alpha1_pb2),
    "dra_health_v1": (dra_health_descriptor.FILE_V1, dra_health_v1_pb2),
}
protocols = pytest.mark.parametrize("protocol", sorted(PROTOCOLS))


def protoc_file(protocol: str) -> descriptor_pb2.FileDescriptorProto:
    data = (HERE / f"{protocol}.desc").read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    assert len(files) == 1
    return files[0]


def file_of(protocol: str) -> ProtoFile:
    return PROTOCOLS[protocol][0]


@protocols
def test_descriptor_is_what_protoc_makes_of_the_proto(protocol: str) -> None:
    built = file_of(protocol).file_descriptor_proto()
    expected = protoc_file(protocol)
    # Compared as messages first for a readable difference, then byte for byte.
    assert built == expected, f"built:\n{built}\nprotoc:\n{expected}"
    assert built.SerializeToString() == expected.SerializeToString()


@protocols
def test_the_loaded_file_is_that_descriptor(protocol: str) -> None:
    module = PROTOCOLS[protocol][1]
    loaded = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    assert loaded.SerializeToString() == protoc_file(protocol).SerializeToString()


@protocols
def test_every_message_of_the_proto_is_a_class_of_the_module(protocol: str) -> None:
    names = {message.name for message in protoc_file(protocol).message_type}
    assert names == set(file_of(protocol).messages)
    module = PROTOCOLS[protocol][1]
    for name in names:
        assert getattr(module, name).DESCRIPTOR.name == name
    assert pb.Device.DESCRIPTOR.full_name == "v1beta1.Device"
    assert podresources_pb2.PodResources.DESCRIPTOR.full_name == "v1.PodResources"


def test_messages_keep_maps_nesting_and_repeated_fields_over_the_wire() -> None:
    response = pb.AllocateResponse(
        container_responses=[
            pb.ContainerAllocateResponse(
                envs={"TOKENS": "token-1,token-2"},
                annotations={"a": "b"},
                mounts=[pb.Mount(container_path="/c", host_path="/h", read_only=True)],
                devices=[pb.DeviceSpec(container_path="/dev/x", permissions="rw")],
                cdi_devices=[pb.CDIDevice(name="vendor.com/class=dev")],
            )
        ]
    )
    again = pb.AllocateResponse.FromString(response.SerializeToString())
    assert again == response
    (container,) = again.container_responses
    assert dict(container.envs) == {"TOKENS": "token-1,token-2"}
    assert container.mounts[0].read_only
    assert container.cdi_devices[0].name == "vendor.com/class=dev"
    device = pb.Device(ID="token-1", health="Healthy", topology=pb.TopologyInfo())
    device.topology.nodes.add(ID=2**40)
    assert pb.Device.FromString(device.SerializeToString()).topology.nodes[0].ID == 2**40


def test_known_bytes_decode_as_the_kubelet_sends_them() -> None:
    # RegisterRequest{version: "v1beta1", endpoint: "a.sock", options{pre_start_required}}:
    # field 1 (0x0a), field 2 (0x12) and the nested message in field 4 (0x22).
    wire = b"\x0a\x07v1beta1\x12\x06a.sock\x22\x02\x08\x01"
    request = pb.RegisterRequest.FromString(wire)
    assert (request.version, request.endpoint) == ("v1beta1", "a.sock")
    assert request.options.pre_start_required
    assert request.SerializeToString() == wire
