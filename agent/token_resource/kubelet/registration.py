"""Registering plugins with the kubelet through ``kubelet.sock``: one channel per kubelet,
every Register of the agent's resources over it."""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio

from token_resource.kubelet.servicer import OPTIONS
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import REGISTER, VERSION

# A current kubelet dials the plugin back before it answers, for up to 10 s.
REGISTER_TIMEOUT = 15.0
# Answers that say nothing about the request: the kubelet is not (or no longer) there.
_UNREACHED = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
# A 1.37+ kubelet's refusal of a socket path it counts as connected (ManagerImpl.PluginConnected).
_ALREADY_CONNECTED = "device plugin already connected"


class RegistrationError(Exception):
    """The kubelet refused the registration or could not be reached."""

    def __init__(self, reason: str, *, answered: bool) -> None:
        super().__init__(reason)
        # True when the kubelet itself refused the request (not unreachable, not too slow).
        self.answered = answered
        # The kubelet holds an endpoint at that socket path already. A 1.37 kubelet refuses the
        # path from then on: its refusal also forgets the client it had there, so that client's
        # end never frees the path (devicemanager/plugin/v1beta1/handler.go, deregisterClient).
        self.already_connected = answered and _ALREADY_CONNECTED in reason


class KubeletClient:
    """A channel to one ``kubelet.sock``; Register calls share it (HTTP/2 multiplexes them)."""

    def __init__(self, socket: Path) -> None:
        self._channel = grpc.aio.insecure_channel(f"unix:{socket}")
        self._register = self._channel.unary_unary(
            REGISTER,
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )

    async def register(self, endpoint: str, resource_name: str) -> None:
        """Register ``resource_name`` served on ``endpoint``; raise RegistrationError.

        Awaited on the event loop that serves the plugin, which must stay free meanwhile: the
        kubelet calls GetDevicePluginOptions on the plugin before it answers.
        """
        request = pb.RegisterRequest(
            version=VERSION, endpoint=endpoint, resource_name=resource_name, options=OPTIONS
        )
        try:
            await self._register(request, timeout=REGISTER_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            # grpcio 1.46 keeps a failed call and this error in a reference cycle (its task holds
            # the error, whose traceback's frames hold the call) and, with the call, its
            # connection to a kubelet that is gone, closed channel or not, until the cyclic
            # collector runs: hours in a quiet agent. Without the traceback nothing holds it.
            error.__traceback__ = None
            raise RegistrationError(
                f"{error.code().name}: {error.details()}", answered=error.code() not in _UNREACHED
            ) from None

    async def close(self) -> None:
        await self._channel.close(None)
