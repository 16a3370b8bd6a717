"""The kubelet's DRA health stream (``DRAResourceHealth/NodeWatchResources``, v1alpha1 and v1):
the health of every device of the driver on this node.

Each message is the complete list: every token of every DRA resource, HEALTHY or UNHEALTHY
with the probe's reason (a resource without a probe is always HEALTHY), sent when the stream
opens, after every change of health or of the pools, and every RESEND_SECONDS in between: the
kubelet marks a device Unknown when it was not updated within ``health_check_timeout_seconds``.
The kubelet writes what it gets into ``pod.status.containerStatuses[].allocatedResourcesStatus``
and changes no allocation: the ResourceSlices' taints keep new pods off unhealthy tokens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc.aio

from token_resource._compat import wait_set
from token_resource.config.model import ResourceSpec
from token_resource.config.names import token_id
from token_resource.health.state import ALL_HEALTHY, TokenHealth
from token_resource.protocol import dra_health_v1alpha1_pb2 as pb

RESEND_SECONDS = 10.0
# Three resends missed: the kubelet then shows the devices as Unknown.
TIMEOUT_SECONDS = 3 * int(RESEND_SECONDS)
# The kubelet (1.36) keeps at most this much of a device's message.
MAX_MESSAGE_CHARS = 1024

Context = grpc.aio.ServicerContext[Any, Any]


class HealthService:
    def __init__(self, pools: Callable[[], Mapping[str, ResourceSpec]]) -> None:
        """``pools()``: pool name -> the resource it publishes, as configured now."""
        self._pools = pools
        self._health: Mapping[str, TokenHealth] = {}
        self._changed = asyncio.Event()
        self._closed = False

    def set_health(self, health: Mapping[str, TokenHealth]) -> None:
        """The tokens' health by resource name; open streams get the new list at once."""
        self._health = dict(health)
        self.wake()

    def wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        """End every stream, so that the server can stop."""
        self._closed = True
        self.wake()

    def response(self) -> pb.NodeWatchResourcesResponse:
        now = int(time.time())
        response = pb.NodeWatchResourcesResponse()
        for pool, spec in sorted(self._pools().items()):
            health = self._health.get(spec.name, ALL_HEALTHY)
            for index in range(spec.count):
                reason = health.unhealthy.get(index)
                response.devices.add(
                    device=pb.DeviceIdentifier(pool_name=pool, device_name=token_id(index)),
                    health=pb.HEALTHY if reason is None else pb.UNHEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=TIMEOUT_SECONDS,
                    message=(reason or "")[:MAX_MESSAGE_CHARS],
                )
        return response

    async def NodeWatchResources(
        self, request: pb.NodeWatchResourcesRequest, context: Context
    ) -> AsyncIterator[pb.NodeWatchResourcesResponse]:
        while not self._closed:
            changed = self._changed
            yield self.response()
            await wait_set(changed, RESEND_SECONDS)
