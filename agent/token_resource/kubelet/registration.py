"""Registering a plugin with the kubelet through ``kubelet.sock``."""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio

from token_resource.kubelet.servicer import OPTIONS
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import KUBELET_SOCKET, REGISTER, VERSION

# A current kubelet dials the plugin back before it answers, for up to 10 s.
REGISTER_TIMEOUT = 15.0


class RegistrationError(Exception):
    """The kubelet refused the registration or could not be reached."""


async def register(directory: Path, endpoint: str, resource_name: str) -> None:
    """Register ``resource_name`` served on ``directory/endpoint``; raise RegistrationError.

    Awaited on the event loop that serves the plugin, which must stay free meanwhile: the
    kubelet calls GetDevicePluginOptions on the plugin before it answers.
    """
    request = pb.RegisterRequest(
        version=VERSION, endpoint=endpoint, resource_name=resource_name, options=OPTIONS
    )
    async with grpc.aio.insecure_channel(f"unix:{directory / KUBELET_SOCKET}") as channel:
        call = channel.unary_unary(
            REGISTER,
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )
        try:
            await call(request, timeout=REGISTER_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            raise RegistrationError(f"{error.code().name}: {error.details()}") from None
