"""The DRA v1beta1 message classes (see ``descriptor`` and ``dra_descriptor``), under protoc's
module name; typed by ``dra_v1beta1_pb2.pyi``.
"""

from token_resource.protocol.dra_descriptor import FILE_V1BETA1

_classes = FILE_V1BETA1.message_classes()
DESCRIPTOR = _classes["NodePrepareResourcesRequest"].DESCRIPTOR.file
NodePrepareResourcesRequest = _classes["NodePrepareResourcesRequest"]
NodePrepareResourcesResponse = _classes["NodePrepareResourcesResponse"]
NodePrepareResourceResponse = _classes["NodePrepareResourceResponse"]
Device = _classes["Device"]
NodeUnprepareResourcesRequest = _classes["NodeUnprepareResourcesRequest"]
NodeUnprepareResourcesResponse = _classes["NodeUnprepareResourcesResponse"]
NodeUnprepareResourceResponse = _classes["NodeUnprepareResourceResponse"]
Claim = _classes["Claim"]
