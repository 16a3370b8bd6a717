"""The deviceplugin v1beta1 message classes (see ``descriptor`` and ``deviceplugin_descriptor``),
under protoc's module name.

The names and types are those of ``deviceplugin_pb2.pyi``, which protoc generates from
``deviceplugin.proto``; the classes themselves are made from a descriptor at import time, so
that they load on every protobuf runtime from 3.14 on.
"""

from token_resource.protocol.deviceplugin_descriptor import FILE

_classes = FILE.message_classes()
DESCRIPTOR = _classes["Empty"].DESCRIPTOR.file
Empty = _classes["Empty"]
DevicePluginOptions = _classes["DevicePluginOptions"]
RegisterRequest = _classes["RegisterRequest"]
ListAndWatchResponse = _classes["ListAndWatchResponse"]
NUMANode = _classes["NUMANode"]
TopologyInfo = _classes["TopologyInfo"]
Device = _classes["Device"]
PreStartContainerRequest = _classes["PreStartContainerRequest"]
PreStartContainerResponse = _classes["PreStartContainerResponse"]
ContainerPreferredAllocationRequest = _classes["ContainerPreferredAllocationRequest"]
PreferredAllocationRequest = _classes["PreferredAllocationRequest"]
ContainerPreferredAllocationResponse = _classes["ContainerPreferredAllocationResponse"]
PreferredAllocationResponse = _classes["PreferredAllocationResponse"]
ContainerAllocateRequest = _classes["ContainerAllocateRequest"]
AllocateRequest = _classes["AllocateRequest"]
Mount = _classes["Mount"]
DeviceSpec = _classes["DeviceSpec"]
CDIDevice = _classes["CDIDevice"]
ContainerAllocateResponse = _classes["ContainerAllocateResponse"]
AllocateResponse = _classes["AllocateResponse"]
