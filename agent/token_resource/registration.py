"""Registering a plugin with the kubelet through ``kubelet.sock``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio

from token_resource.protocol import KUBELET_SOCKET, REGISTER, VERSION
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.servicer import OPTIONS

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
        # gRPC's call object and the traceback of what it raises refer to each other, and the
        # call holds its connection to the kubelet until the cyclic garbage collector frees it,
        # which in a quiet agent can take hours (grpcio 1.46: a connection to a dead kubelet
        # kept per restart). Dropping the traceback here frees the call at once.
        try:
            await call(request, timeout=REGISTER_TIMEOUT)
            return
        except grpc.aio.AioRpcError as error:
            failure = f"{error.code().name}: {error.details()}"
            error.__traceback__ = None
        except asyncio.CancelledError as cancelled:
            raise cancelled.with_traceback(None) from None
    raise RegistrationError(failure)
