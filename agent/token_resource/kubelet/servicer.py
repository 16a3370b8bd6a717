"""The ``v1beta1.DevicePlugin`` service for one resource's tokens."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Callable, NoReturn

import grpc
import grpc.aio

from token_resource.config.model import ResourceSpec
from token_resource.kubelet.tokens import AllocationError, TokenPool, in_token_order
from token_resource.observe.observer import Observer
from token_resource.protocol import deviceplugin_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]

# What this plugin tells the kubelet, in GetDevicePluginOptions and in RegisterRequest.options
# alike (older kubelets read the latter, newer ones call the former).
OPTIONS = pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


class TokenServicer:
    """Answers the kubelet for one resource; ``spec()`` gives the resource's current settings."""

    def __init__(
        self,
        pool: TokenPool,
        spec: Callable[[], ResourceSpec],
        log: logging.Logger,
        observer: Observer,
        on_stream: Callable[[], None] = lambda: None,
    ) -> None:
        self._pool = pool
        self._spec = spec
        self._log = log
        self._observer = observer
        self._on_stream = on_stream
        self._closed = False

    def close(self) -> None:
        """End every ListAndWatch stream of this servicer, so its server can stop cleanly."""
        self._closed = True
        self._pool.wake()

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: Context
    ) -> pb.DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(
        self, request: pb.Empty, context: Context
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        self._log.debug("ListAndWatch stream opened")
        self._on_stream()
        try:
            async for listing in self._pool.watch():
                if self._closed:
                    return
                yield listing
        finally:
            self._log.debug("ListAndWatch stream closed")

    async def Allocate(self, request: pb.AllocateRequest, context: Context) -> pb.AllocateResponse:
        started = time.monotonic()
        try:
            response = self._allocate(request)
        except AllocationError as error:
            # Counted before the answer goes out: whoever saw the refusal finds it counted.
            self._allocate_answered(started, ok=False)
            await self._refuse(context, error)
        self._allocate_answered(started, ok=True)
        return response

    def _allocate_answered(self, started: float, *, ok: bool) -> None:
        seconds = time.monotonic() - started
        self._observer.allocate_answered(self._spec().name, seconds, ok=ok)

    def _allocate(self, request: pb.AllocateRequest) -> pb.AllocateResponse:
        if not request.container_requests:
            raise AllocationError("the request holds no container requests")
        env_name = self._spec().env
        response = pb.AllocateResponse()
        for container in request.container_requests:
            device_ids = in_token_order(container.devices_ids)
            self._pool.check_allocation(device_ids)
            response.container_responses.add().envs[env_name] = ",".join(device_ids)
            self._log.info("allocated %s", ", ".join(device_ids))
        return response

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: Context
    ) -> pb.PreferredAllocationResponse:
        if not request.container_requests:
            await self._refuse(context, AllocationError("the request holds no container requests"))
        response = pb.PreferredAllocationResponse()
        for container in request.container_requests:
            try:
                preferred = self._pool.preferred(
                    list(container.available_deviceIDs),
                    list(container.must_include_deviceIDs),
                    container.allocation_size,
                )
            except AllocationError as error:
                await self._refuse(context, error)
            response.container_responses.add().deviceIDs.extend(preferred)
        return response

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: Context
    ) -> pb.PreStartContainerResponse:
        # Never requested (pre_start_required is false); answered for kubelets that call anyway.
        return pb.PreStartContainerResponse()

    async def _refuse(self, context: Context, error: AllocationError) -> NoReturn:
        self._log.warning("refused a kubelet request: %s", error)
        code = grpc.StatusCode.NOT_FOUND if error.unknown else grpc.StatusCode.INVALID_ARGUMENT
        await context.abort(code, str(error))
