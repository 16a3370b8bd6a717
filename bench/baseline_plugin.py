#!/usr/bin/env python3
"""The comparison baseline: one resource, one process, a fixed count, synchronous gRPC.

What a user writes instead of token-resource, modelled on the typical ~250-line Go device
plugin (and its Python ports): a gRPC server on its own unix socket with a thread pool, a
``Register`` call to ``kubelet.sock``, ListAndWatch that sends the list once and then blocks,
Allocate that hands out an environment variable. The count is fixed at start: changing it
means restarting the process. It follows no kubelet restart and watches no file; it is the
floor of what such a plugin costs, not a strawman.

    python -m bench.baseline_plugin --dir DIR --resource example.com/token --count 2
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import (
    DEVICE_PLUGIN_SERVICE,
    HEALTHY,
    KUBELET_SOCKET,
    REGISTER,
    VERSION,
)

# The usual choice of such scripts (and of grpc's own examples).
_WORKERS = 10
_OPTIONS = pb.DevicePluginOptions(get_preferred_allocation_available=False)


class Plugin:
    def __init__(self, resource: str, count: int) -> None:
        self.resource = resource
        self.env = "TOKENS_" + "".join(c if c.isalnum() else "_" for c in resource).upper()
        self.devices = [pb.Device(ID=f"token-{i}", health=HEALTHY) for i in range(count)]
        self.stopped = threading.Event()

    def get_options(self, request: pb.Empty, context: grpc.ServicerContext) -> Any:
        return _OPTIONS

    def list_and_watch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[Any]:
        yield pb.ListAndWatchResponse(devices=self.devices)
        # Nothing ever changes: hold the stream open until the kubelet or we go away.
        while context.is_active() and not self.stopped.wait(1.0):
            pass

    def allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> Any:
        response = pb.AllocateResponse()
        for container in request.container_requests:
            response.container_responses.add().envs[self.env] = ",".join(container.devices_ids)
        return response

    def pre_start(self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext) -> Any:
        return pb.PreStartContainerResponse()

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        unary = grpc.unary_unary_rpc_method_handler
        return grpc.method_handlers_generic_handler(
            DEVICE_PLUGIN_SERVICE,
            {
                "GetDevicePluginOptions": unary(
                    self.get_options, pb.Empty.FromString, pb.DevicePluginOptions.SerializeToString
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    pb.Empty.FromString,
                    pb.ListAndWatchResponse.SerializeToString,
                ),
                "Allocate": unary(
                    self.allocate,
                    pb.AllocateRequest.FromString,
                    pb.AllocateResponse.SerializeToString,
                ),
                "PreStartContainer": unary(
                    self.pre_start,
                    pb.PreStartContainerRequest.FromString,
                    pb.PreStartContainerResponse.SerializeToString,
                ),
            },
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fixed-count single-resource device plugin.")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args(argv)

    plugin = Plugin(args.resource, args.count)
    endpoint = "baseline." + args.resource.replace("/", "_") + ".sock"
    socket_path = args.dir / endpoint
    socket_path.unlink(missing_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=_WORKERS))
    server.add_generic_rpc_handlers((plugin.handler(),))
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()

    with grpc.insecure_channel(f"unix:{args.dir / KUBELET_SOCKET}") as channel:
        register = channel.unary_unary(
            REGISTER, pb.RegisterRequest.SerializeToString, pb.Empty.FromString
        )
        register(
            pb.RegisterRequest(
                version=VERSION, endpoint=endpoint, resource_name=args.resource, options=_OPTIONS
            ),
            timeout=30,
        )

    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    done.wait()
    plugin.stopped.set()
    server.stop(1).wait()
    socket_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
