"""The kubelet's plugin registration API: method paths, the service a plugin serves, and the
client side for kubelet stand-ins.

The kubelet's plugin watcher finds a socket in its ``plugins_registry`` directory, calls
``GetInfo`` on it and answers with ``NotifyRegistrationStatus``; removing the socket
deregisters the plugin. The messages come from ``pluginregistration.proto``.
"""

from __future__ import annotations

from typing import Any, Protocol

import grpc
import grpc.aio

from token_resource.protocol import pluginregistration_pb2 as pb

REGISTRATION_SERVICE = "pluginregistration.Registration"
GET_INFO = f"/{REGISTRATION_SERVICE}/GetInfo"
NOTIFY_REGISTRATION_STATUS = f"/{REGISTRATION_SERVICE}/NotifyRegistrationStatus"
# PluginInfo.type of a DRA driver (CSI drivers say "CSIPlugin").
DRA_PLUGIN_TYPE = "DRAPlugin"


class RegistrationServicer(Protocol):
    """What a plugin serves on its registration socket; the kubelet calls it."""

    async def GetInfo(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PluginInfo: ...

    async def NotifyRegistrationStatus(
        self, request: pb.RegistrationStatus, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RegistrationStatusResponse: ...


def registration_handler(servicer: RegistrationServicer) -> grpc.GenericRpcHandler[Any, Any]:
    """The ``pluginregistration.Registration`` service of ``servicer``."""
    return grpc.method_handlers_generic_handler(
        REGISTRATION_SERVICE,
        {
            "GetInfo": grpc.unary_unary_rpc_method_handler(
                servicer.GetInfo,
                request_deserializer=pb.InfoRequest.FromString,
                response_serializer=pb.PluginInfo.SerializeToString,
            ),
            "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                servicer.NotifyRegistrationStatus,
                request_deserializer=pb.RegistrationStatus.FromString,
                response_serializer=pb.RegistrationStatusResponse.SerializeToString,
            ),
        },
    )
