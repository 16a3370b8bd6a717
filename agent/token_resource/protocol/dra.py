"""The kubelet's DRA node service: method paths and the server side of both versions.

A kubelet of 1.34 on calls ``v1.DRAPlugin`` when a plugin lists it in
``PluginInfo.supported_versions``, else ``v1beta1.DRAPlugin``; 1.32 and 1.33 know only the latter.
The two are the same messages under two proto packages, so one servicer, written against the
v1 classes, serves both: the bytes on the wire are identical (``tests/test_dra_protocol.py``).
"""

from __future__ import annotations

from typing import Any, Protocol

import grpc
import grpc.aio

from token_resource.protocol import dra_v1_pb2 as pb
from token_resource.protocol.dra_descriptor import PACKAGE_PREFIX

# The version names of PluginInfo.supported_versions, newest first, and their gRPC services.
SERVICES = {
    "v1.DRAPlugin": f"{PACKAGE_PREFIX}.v1.DRAPlugin",
    "v1beta1.DRAPlugin": f"{PACKAGE_PREFIX}.v1beta1.DRAPlugin",
}
SUPPORTED_VERSIONS = tuple(SERVICES)


def method(version: str, name: str) -> str:
    """E.g. ("v1.DRAPlugin", "NodePrepareResources") -> its full gRPC method path."""
    return f"/{SERVICES[version]}/{name}"


class DRAPluginServicer(Protocol):
    """What a DRA driver serves on its service socket; the kubelet calls it."""

    async def NodePrepareResources(
        self, request: pb.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.NodePrepareResourcesResponse: ...

    async def NodeUnprepareResources(
        self,
        request: pb.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.NodeUnprepareResourcesResponse: ...


def dra_plugin_handlers(servicer: DRAPluginServicer) -> list[grpc.GenericRpcHandler[Any, Any]]:
    """Both versions of the ``DRAPlugin`` service of ``servicer``."""
    return [
        grpc.method_handlers_generic_handler(
            service,
            {
                "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                    servicer.NodePrepareResources,
                    request_deserializer=pb.NodePrepareResourcesRequest.FromString,
                    response_serializer=pb.NodePrepareResourcesResponse.SerializeToString,
                ),
                "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                    servicer.NodeUnprepareResources,
                    request_deserializer=pb.NodeUnprepareResourcesRequest.FromString,
                    response_serializer=pb.NodeUnprepareResourcesResponse.SerializeToString,
                ),
            },
        )
        for service in SERVICES.values()
    ]
