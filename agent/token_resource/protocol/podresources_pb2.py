"""The PodResources v1 message classes (see ``descriptor`` and ``podresources_descriptor``),
under protoc's module name.

The names and types are those of ``podresources_pb2.pyi``, which protoc generates from
``podresources.proto``; the classes themselves are made from a descriptor at import time, so
that they load on every protobuf runtime from 3.14 on.
"""

from token_resource.protocol.podresources_descriptor import FILE

_classes = FILE.message_classes()
DESCRIPTOR = _classes["PodResources"].DESCRIPTOR.file
AllocatableResourcesRequest = _classes["AllocatableResourcesRequest"]
AllocatableResourcesResponse = _classes["AllocatableResourcesResponse"]
ListPodResourcesRequest = _classes["ListPodResourcesRequest"]
ListPodResourcesResponse = _classes["ListPodResourcesResponse"]
PodResources = _classes["PodResources"]
ContainerResources = _classes["ContainerResources"]
ContainerMemory = _classes["ContainerMemory"]
ContainerDevices = _classes["ContainerDevices"]
TopologyInfo = _classes["TopologyInfo"]
NUMANode = _classes["NUMANode"]
DynamicResource = _classes["DynamicResource"]
ClaimResource = _classes["ClaimResource"]
CDIDevice = _classes["CDIDevice"]
GetPodResourcesRequest = _classes["GetPodResourcesRequest"]
GetPodResourcesResponse = _classes["GetPodResourcesResponse"]
