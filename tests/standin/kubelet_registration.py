"""The kubelet stand-in's Registration server: how the device manager answers ``Register``.

As the real kubelet (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go ``Register``,
handler.go ``RegisterPlugin``/``connectClient``, manager.go ``PluginConnected``): the request
is checked (version, resource name, endpoint: kubelet_rules.py ``registration_problem``), the
client is registered, the plugin dialled and asked GetDevicePluginOptions, and the resource's
endpoint set (kubelet_endpoints.py), its client thread started (kubelet_links.py). A 1.32
kubelet does this before it answers, and a failure fails the Register (``failed to dial device
plugin: ...``); a 1.24-era one (``register_first``) answers at once, takes the options from
``RegisterRequest.options`` and dials afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NoReturn

import grpc

from tests.standin.kubelet_links import DevicePluginClients, DialError, Link, serialize
from tests.standin.kubelet_rules import (
    Options,
    ResourceView,
    _quote,
    registration_problem,
    rpc_error,
)
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import GET_DEVICE_PLUGIN_OPTIONS, MAX_MESSAGE_BYTES

# A plugin's messages are refused above this size, as by the kubelet's gRPC client.
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]


class _Stale(Exception):
    """A Register finished after the kubelet stopped or restarted under it."""


class RegistrationServer(DevicePluginClients):
    """The handler of the kubelet stand-in's ``v1beta1.Registration`` service."""

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        with self._cond:
            generation = self._generation
        problem = registration_problem(request, self._subdirectory_endpoints)
        if problem is not None:
            self._refuse(context, request, problem)
        path = self.socket_dir / request.endpoint
        link = Link(
            request.resource_name,
            path,
            grpc.insecure_channel(f"unix:{path}", _CHANNEL_OPTIONS),
            request.endpoint,
            Options.of(request.options),
        )
        if self.device_manager != "1.32":
            with self._cond:  # connectClient's registerClient comes before the dial
                self._book.register_client(link)
        try:
            if not self._register_first:
                link.options = self._connect(link, lambda: not self._serving(generation))
            replaced = self._accept(request, link, generation)
        except DialError as error:
            self._forget(link)
            self._refuse(context, request, str(error))
        except _Stale:
            self._forget(link)
            context.abort(grpc.StatusCode.UNAVAILABLE, "the kubelet restarted during Register")
        # "1.32": the old stream is already cancelled; let its thread finish before answering.
        self._await_links(replaced)
        return pb.Empty()

    def _forget(self, link: Link) -> None:
        """A failed connectClient: deregisterClient (up to 1.36 by name, in 1.37 every client
        of the path, a live one too: kubelet_endpoints.py), and the channel is not used."""
        if self.device_manager != "1.32":
            with self._cond:
                self._book.deregister_client(link.resource, link.path)
        link.channel.close()

    def _refuse(
        self, context: grpc.ServicerContext, request: pb.RegisterRequest, error: str
    ) -> NoReturn:
        """Record and fail the Register call (a Go error reaches the plugin as UNKNOWN)."""
        with self._cond:
            self._rejected.append(error)
            self._changed(f"refused Register of {_quote(request.resource_name)}: {error}")
        context.abort(grpc.StatusCode.UNKNOWN, error)

    def _connect(self, link: Link, abandoned: Callable[[], bool]) -> Options:
        """The 1.32 kubelet's synchronous part of Register: dial, then GetDevicePluginOptions."""
        self._dial(link, abandoned)
        get_options = link.channel.unary_unary(
            GET_DEVICE_PLUGIN_OPTIONS, serialize, pb.DevicePluginOptions.FromString
        )
        # The kubelet sets no deadline here; the dial timeout keeps a stuck plugin from
        # holding a test (and stop()) forever.
        future = get_options.future(pb.Empty(), timeout=self._dial_timeout)
        self._wait(future, abandoned, None)
        try:
            return Options.of(future.result())
        except grpc.RpcError as error:
            raise DialError(f"failed to get device plugin options: {rpc_error(error)}") from None

    def _accept(
        self,
        request: pb.RegisterRequest,
        link: Link,
        generation: int,
    ) -> list[Link]:
        """PluginConnected: make ``link`` the resource's current endpoint (1.37: refused if
        its path is connected already) and start its client thread.

        Returns the registrations it replaced ("1.32"), whose streams are cancelled first.
        """
        name = request.resource_name
        with self._cond:
            if not self._serving(generation):
                raise _Stale
            replaced: list[Link] = []
            if self.device_manager == "1.32":  # the stand-in's own model: close the old one
                replaced = self._book.register_client(link)
                for old in replaced:
                    self._drop(old)
            error = self._book.connect(link)
            if error is not None:
                raise DialError(error)
            previous = self._views.get(name)
            self._views[name] = ResourceView(
                name=name,
                endpoint=request.endpoint,
                register_options=link.register_options,
                options=link.options,
                registrations=1 if previous is None else previous.registrations + 1,
                registered_at=time.monotonic(),
                # The kubelet keeps the old list until the new stream sends one.
                devices=() if previous is None else previous.devices,
                # A 1.32 kubelet counts the plugin as connected once Register succeeds;
                # a 1.24-era one only after its later dial.
                stream_open=not self._register_first,
            )
            self._endpoints_changed(name)
            link.thread = threading.Thread(
                target=self._run_link, args=(link,), name=f"kubelet-{name}", daemon=True
            )
            self._ended = [
                live for live in self._ended if live.thread and live.thread.is_alive()
            ] + [link]
            link.thread.start()
            self._changed(f"registered {name} via {request.endpoint}")
            return replaced
