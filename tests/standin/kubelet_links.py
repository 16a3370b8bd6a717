"""The kubelet stand-in's clients of its device plugins: one connection ("link") per successful
Register, its ListAndWatch client thread, and the unary calls the kubelet makes on the
connection it holds.

As the real device manager (pkg/kubelet/cm/devicemanager): the client dials the plugin's
socket and blocks until connected (plugin/v1beta1/client.go ``dial``, ``Connect``), keeps its
ListAndWatch stream open (``Run``), and each list it receives replaces the resource's device
set (manager.go ``genericDeviceUpdateCallback``); a list over 4 MiB is refused by the gRPC
client. When a stream ends, the handler disconnects the client it finds for it
(handler.go ``runClient``; which one, by release: kubelet_endpoints.py). Allocate and
GetPreferredAllocation go to the resource's current endpoint (manager.go
``allocateContainerResources``, ``callGetPreferredAllocationIfAvailable``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from tests.standin.kubelet_endpoints import EndpointBook
from tests.standin.kubelet_rules import (
    NEVER_DIALLED,
    Options,
    ResourceView,
    _abridged,
    _describe,
    device_problems,
    rpc_error,
)
from tests.standin.kubelet_state import LOG, KubeletState
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import (
    ALLOCATE,
    GET_PREFERRED_ALLOCATION,
    LIST_AND_WATCH,
)

_Response = TypeVar("_Response", bound=Message)


class DialError(Exception):
    """The kubelet could not connect to a plugin (dial, options, PluginConnected); the text is
    the kubelet's error."""


@dataclass(eq=False)
class Link:
    """The kubelet's connection to the plugin of one successful Register."""

    resource: str
    path: Path
    channel: grpc.Channel
    endpoint: str  # as the Register named it
    register_options: Options
    options: Options | None = None  # GetDevicePluginOptions' answer
    call: grpc.CallIterator[pb.ListAndWatchResponse] | None = None
    thread: threading.Thread | None = None
    # Set under the lock once the kubelet closed it (disconnected, or replaced in "1.32"): its
    # lists no longer count.
    closed: bool = False
    ended: bool = False  # its stream ended (set under the lock)


class DevicePluginClients(KubeletState):
    """The links of a kubelet stand-in: their threads, the views they update, the calls."""

    _dial_timeout: float
    _register_first: bool
    _subdirectory_endpoints: str  # kubelet_rules.py: JOINED, REFUSED or NEVER_DIALLED
    # Guarded by _cond:
    _book: EndpointBook[Link]  # the clients and endpoints it holds
    _ended: list[Link]  # every link whose thread may not have ended yet

    def _await_links(self, links: Sequence[Link]) -> None:
        """Caller does NOT hold the lock: wait for the client threads of ``links``, whose
        streams were cancelled (:func:`wait_until_ended`, for as long as KubeletStandin
        allows)."""
        raise NotImplementedError

    # --- calling plugins, as the kubelet does ----------------------------------------------

    def allocate(
        self, resource: str, device_ids: Sequence[str], timeout: float = 10.0
    ) -> pb.AllocateResponse:
        """Allocate with one container request, as the kubelet sends at container creation."""
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=device_ids)]
        )
        return self.allocate_raw(resource, request, timeout)

    def allocate_raw(
        self, resource: str, request: pb.AllocateRequest, timeout: float = 10.0
    ) -> pb.AllocateResponse:
        return self._call(resource, ALLOCATE, request, pb.AllocateResponse, timeout)

    def get_preferred_allocation(
        self,
        resource: str,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
        timeout: float = 10.0,
    ) -> pb.PreferredAllocationResponse:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must_include,
                    allocation_size=size,
                )
            ]
        )
        return self.get_preferred_allocation_raw(resource, request, timeout)

    def get_preferred_allocation_raw(
        self, resource: str, request: pb.PreferredAllocationRequest, timeout: float = 10.0
    ) -> pb.PreferredAllocationResponse:
        return self._call(
            resource, GET_PREFERRED_ALLOCATION, request, pb.PreferredAllocationResponse, timeout
        )

    def _call(
        self,
        resource: str,
        method: str,
        request: Message,
        response_type: type[_Response],
        timeout: float,
    ) -> _Response:
        """A unary call on the connection the kubelet holds; grpc.RpcError propagates as-is."""
        with self._cond:
            link = self._book.current(resource)
            if link is None or not self._views[resource].stream_open:
                raise LookupError(f"{resource}: no device plugin connected")
        rpc = link.channel.unary_unary(method, serialize, response_type.FromString)
        response: _Response = rpc(request, timeout=timeout)
        return response

    # --- dialling a plugin --------------------------------------------------------------------

    def _dial(self, link: Link, abandoned: Callable[[], bool]) -> None:
        """Like grpc.DialContext with WithBlock: wait until connected, at most the dial timeout."""
        if not link.path.is_socket():
            raise DialError(f"failed to dial device plugin: no socket at {link.path}")
        try:
            self._wait(grpc.channel_ready_future(link.channel), abandoned, self._dial_timeout)
        except DialError as error:
            raise DialError(f"failed to dial device plugin: {error}") from None

    def _wait(
        self, future: grpc.Future[Any], abandoned: Callable[[], bool], timeout: float | None
    ) -> None:
        """Wait for a gRPC future, giving up (and cancelling it) at the timeout or when
        ``abandoned()`` turns true, so that stop() never waits for a dial to time out."""
        future.add_done_callback(lambda _: self._wake())
        with self._cond:
            self._cond.wait_for(lambda: future.done() or abandoned(), timeout)
            gave_up = abandoned()
        if not future.done() or gave_up:
            future.cancel()
            raise DialError("context canceled" if gave_up else "context deadline exceeded")

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # --- one client thread per registration -------------------------------------------------

    def _run_link(self, link: Link) -> None:
        """The kubelet's client loop: (dial,) open ListAndWatch, record every message."""
        reason = "the plugin ended the stream"
        refused = False
        try:
            if self._register_first:
                if (
                    self._subdirectory_endpoints == NEVER_DIALLED
                    and "/" in link.path.relative_to(self.socket_dir).as_posix()
                ):
                    LOG.info("%s: not dialling %s (a subdirectory)", link.resource, link.path)
                    return
                self._dial(link, lambda: link.closed)
            call = self._open_stream(link)
            for response in call or ():
                self._received(link, response)
        except DialError as error:
            reason, refused = f"{error} (after Register was answered)", True
        except grpc.RpcError as error:
            reason = rpc_error(error)
            # The kubelet's client refused a message (over 4 MiB): a protocol violation.
            refused = error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            if not self._link_ended(link, reason, refused):
                link.channel.close()

    def _open_stream(self, link: Link) -> grpc.CallIterator[pb.ListAndWatchResponse] | None:
        with self._cond:
            if link.closed:
                return None
            list_and_watch = link.channel.unary_stream(
                LIST_AND_WATCH, serialize, pb.ListAndWatchResponse.FromString
            )
            link.call = list_and_watch(pb.Empty())
            if self._register_first:
                self._update(link.resource, stream_open=True)
                self._changed(f"connected to {link.resource} at {link.path.name}")
            return link.call

    def _received(self, link: Link, response: pb.ListAndWatchResponse) -> None:
        """Each message replaces the whole device set, whichever of the resource's clients
        sent it (genericDeviceUpdateCallback); in the real handlers ("1.36", "1.37") it also
        makes the healthy ones allocatable again, connected endpoint or not."""
        devices = tuple((device.ID, device.health) for device in response.devices)
        problems = device_problems(devices)
        with self._cond:
            if link.closed:
                return
            view = self._views[link.resource]
            self._update(
                link.resource,
                devices=devices,
                stream_open=view.stream_open or self.device_manager != "1.32",
                lists_received=view.lists_received + 1,
                listed_at=time.monotonic() if view.listed_at is None else view.listed_at,
            )
            events = [f"{link.resource}: {_describe(devices)}"]
            for problem in _abridged(problems):
                self._rejected.append(f"{link.resource}: {problem}")
                events.append(f"protocol violation: {link.resource}: {problem}")
            self._changed(*events)

    def _link_ended(self, link: Link, reason: str, refused: bool) -> bool:
        """handler.go runClient after a stream ended: disconnect the client the handler finds
        for it (kubelet_endpoints.py: not always this one, or none). True if ``link`` stays
        an endpoint of the kubelet all the same (a stale one), its channel kept open."""
        name = link.resource
        with self._cond:
            link.ended = True
            if refused and not link.closed:
                self._rejected.append(f"{name}: {reason}")
            client = self._book.client_for(link)
            if client is None:  # closed by the kubelet itself, or forgotten by its handler
                stale = link in self._book.endpoints(name)
                if stale:
                    self._endpoints_changed(name)
                    self._changed(
                        f"stream for {name} at {link.endpoint} ended ({reason}), but its "
                        "client was forgotten: a stale endpoint, still allocatable"
                    )
                return stale
            self._book.deregister_client(name, client.path)
            self._drop(client)  # Disconnect closes its connection
            unhealthy = self._book.disconnect(client)
            view = self._endpoints_changed(name, **({"stream_open": False} if unhealthy else {}))
            outcome = "allocatable 0" if unhealthy else f"current endpoint {view.endpoint}"
            if client is not link:  # up to 1.36 the handler finds its client by name
                outcome = f"disconnected {client.endpoint}, {outcome}"
            self._changed(f"stream for {name} at {link.endpoint} ended ({reason}): {outcome}")
            return False

    def _endpoints_changed(self, name: str, **changes: Any) -> ResourceView:
        """Caller holds the lock: the view follows the kubelet's endpoints of ``name``."""
        held = self._book.endpoints(name)
        current = self._book.current(name)
        if current is not None:
            changes.update(
                endpoint=current.endpoint,
                register_options=current.register_options,
                options=current.options,
            )
        self._update(
            name,
            endpoints=tuple(link.endpoint for link in held),
            stale_endpoints=tuple(link.endpoint for link in held if link.ended),
            **changes,
        )
        return self._views[name]

    def _drop_links(self, running: Sequence[Link]) -> list[Link]:
        """Caller holds the lock: the kubelet goes away, every resource becomes unhealthy.
        Returns the endpoints it held (stale ones' channels are still open)."""
        for link in running:
            self._drop(link)
        held = self._book.clear()
        for name in self._views:
            self._endpoints_changed(name, stream_open=False)
        return held

    def _drop(self, link: Link) -> None:
        """Caller holds the lock: stop using ``link`` and cancel its stream (or pending dial)."""
        link.closed = True
        if link.call is not None:
            link.call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves it untyped


def wait_until_ended(links: Sequence[Link], seconds: float) -> None:
    """Wait for the client threads of ``links``, whose streams were cancelled: a bounded wait
    (``seconds``), then their channels closed and another; a thread still running then is an
    error."""
    deadline = time.monotonic() + seconds
    for link in links:
        if link.thread is not None:
            link.thread.join(max(deadline - time.monotonic(), 0))
    stuck = [link for link in links if link.thread is not None and link.thread.is_alive()]
    for link in stuck:
        LOG.warning("%s: the client thread outlived its cancelled stream", link.resource)
        link.channel.close()
    for link in stuck:
        assert link.thread is not None
        link.thread.join(seconds)
    still = [link.resource for link in stuck if link.thread is not None and link.thread.is_alive()]
    if still:
        raise RuntimeError(f"kubelet stand-in: the client threads of {still} did not end")


def serialize(message: Message) -> bytes:
    return message.SerializeToString()
