"""The kubelet's DRA node service: method paths and the server side of both versions.

A kubelet of 1.34 on calls ``v1.DRAPlugin`` when a plugin lists it in
``PluginInfo.supported_versions``, else ``v1beta1.DRAPlugin``; 1.32 and 1.33 know only the latter.
The two are the same messages under two proto packages, so one servicer, written against the
v1 classes, serves both: the bytes on the wire are identical
(``tests/protocol/test_dra_protocol.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import grpc
import grpc.aio

from token_resource.protocol import dra_health_v1alpha1_pb2 as health_pb
from token_resource.protocol import dra_v1_pb2 as pb
from token_resource.protocol.dra_descriptor import PACKAGE_PREFIX

# The version names of PluginInfo.supported_versions, newest first, and their gRPC services.
SERVICES = {
    "v1.DRAPlugin": f"{PACKAGE_PREFIX}.v1.DRAPlugin",
    "v1beta1.DRAPlugin": f"{PACKAGE_PREFIX}.v1beta1.DRAPlugin",
}
# The health service (ResourceHealthStatus, KEP-4680), served on the same socket: a 1.34-1.36
# kubelet dials v1alpha1 on every registered driver every 5 s, a 1.37 one opens v1 only on a
# driver that lists it in PluginInfo.supported_versions.
HEALTH_SERVICES = ("v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth")
HEALTH_VERSION = "v1.DRAResourceHealth"
# PluginInfo.supported_versions: the DRAPlugin versions, newest first (the kubelet takes the
# first it speaks), then the health version a 1.37 kubelet looks for.
SUPPORTED_VERSIONS = (*SERVICES, HEALTH_VERSION)


def method(version: str, name: str) -> str:
    """E.g. ("v1.DRAPlugin", "NodePrepareResources") -> its full gRPC method path."""
    return f"/{SERVICES[version]}/{name}"


def health_method(service: str) -> str:
    """E.g. "v1.DRAResourceHealth" -> its NodeWatchResources method path."""
    return f"/{service}/NodeWatchResources"


class DRAResourceHealthServicer(Protocol):
    """The health stream a DRA driver serves beside DRAPlugin; the kubelet reads it."""

    def NodeWatchResources(
        self,
        request: health_pb.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[health_pb.NodeWatchResourcesResponse]: ...


def dra_health_handlers(
    servicer: DRAResourceHealthServicer,
) -> list[grpc.GenericRpcHandler[Any, Any]]:
    """Both versions of the health service of ``servicer``: the same messages on the wire."""
    return [
        grpc.method_handlers_generic_handler(
            service,
            {
                "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                    servicer.NodeWatchResources,
                    request_deserializer=health_pb.NodeWatchResourcesRequest.FromString,
                    response_serializer=health_pb.NodeWatchResourcesResponse.SerializeToString,
                ),
            },
        )
        for service in HEALTH_SERVICES
    ]


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
