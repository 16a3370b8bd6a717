"""The floor the agent is measured against: an ideal device-plugin client with nothing to do
but serve N resources and call Register for each.

One asyncio process serves N device plugins (a fixed list of ``token-N`` devices each) with
its sockets in a subdirectory of the device-plugin directory, which a restarting kubelet leaves
alone; it learns of a (re)started kubelet from inotify, as the agent does, and then registers
every resource at once over one channel (again at once for a Register the kubelet refused).
No configuration, no reload, no status, no backoff: whatever the agent spends beyond this is
its own overhead.

python -m bench.floor_plugin --dir DIR --resources N --count C
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from bench.support import resource_names
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import (
    HEALTHY,
    KUBELET_SOCKET,
    REGISTER,
    VERSION,
    device_plugin_handler,
)

SUBDIRECTORY = "floor"
REGISTER_ATTEMPTS = 5
OPTIONS = pb.DevicePluginOptions(get_preferred_allocation_available=False)
Context = grpc.aio.ServicerContext[Any, Any]


class Plugin:
    """One resource's device plugin: its list, sent once per stream; the stream stays open."""

    def __init__(self, count: int) -> None:
        self._listing = pb.ListAndWatchResponse(
            devices=[pb.Device(ID=f"token-{i}", health=HEALTHY) for i in range(count)]
        )

    async def GetDevicePluginOptions(self, request: pb.Empty, context: Context) -> Any:
        return OPTIONS

    async def ListAndWatch(self, request: pb.Empty, context: Context) -> AsyncIterator[Any]:
        yield self._listing
        await asyncio.Event().wait()

    async def GetPreferredAllocation(self, request: Any, context: Context) -> Any:
        return pb.PreferredAllocationResponse()

    async def Allocate(self, request: Any, context: Context) -> Any:
        return pb.AllocateResponse()

    async def PreStartContainer(self, request: Any, context: Context) -> Any:
        return pb.PreStartContainerResponse()


async def serve(path: Path, count: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((device_plugin_handler(Plugin(count)),))
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    return server


async def register_all(kubelet_socket: Path, endpoints: dict[str, str]) -> None:
    """Register every resource at once; one the kubelet refused, again at once (a busy machine
    can make the kubelet's dial-back time out), a few times at most."""
    async with grpc.aio.insecure_channel(f"unix:{kubelet_socket}") as channel:
        register = channel.unary_unary(
            REGISTER,
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.Empty.FromString,
        )

        async def register_one(name: str, endpoint: str) -> None:
            request = pb.RegisterRequest(
                version=VERSION, endpoint=endpoint, resource_name=name, options=OPTIONS
            )
            for _ in range(REGISTER_ATTEMPTS):
                try:
                    await register(request, timeout=30)
                    return
                except grpc.RpcError as error:
                    print(f"floor: Register {name} failed: {error}", file=sys.stderr, flush=True)

        await asyncio.gather(
            *(register_one(name, endpoint) for name, endpoint in endpoints.items())
        )


class _KubeletStarts(FileSystemEventHandler):
    def __init__(self, loop: asyncio.AbstractEventLoop, kubelet_socket: Path) -> None:
        self._loop = loop
        self._socket = str(kubelet_socket)
        self.started: asyncio.Queue[None] = asyncio.Queue()

    def on_created(self, event: FileSystemEvent) -> None:
        self._arrived(event.src_path)

    def on_moved(self, event: FileSystemEvent) -> None:
        # A kubelet that binds under another name and renames the socket into place.
        self._arrived(event.dest_path)

    def _arrived(self, path: str | bytes) -> None:
        if path == self._socket:
            self._loop.call_soon_threadsafe(self.started.put_nowait, None)


async def main_async(directory: Path, resources: int, count: int) -> None:
    loop = asyncio.get_running_loop()
    own = directory / SUBDIRECTORY
    own.mkdir(exist_ok=True)
    endpoints = {
        name: f"{SUBDIRECTORY}/{name.replace('/', '_')}.sock" for name in resource_names(resources)
    }
    servers = await asyncio.gather(
        *(serve(directory / endpoint, count) for endpoint in endpoints.values())
    )
    kubelet_socket = directory / KUBELET_SOCKET
    starts = _KubeletStarts(loop, kubelet_socket)
    observer = Observer()
    observer.schedule(starts, str(directory), recursive=False)
    observer.start()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if kubelet_socket.is_socket():
        starts.started.put_nowait(None)
    try:
        while not stop.is_set():
            started = asyncio.ensure_future(starts.started.get())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({started, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if started.done():
                await register_all(kubelet_socket, endpoints)
            else:
                started.cancel()
    finally:
        observer.stop()
        observer.join()
        await asyncio.gather(*(server.stop(None) for server in servers))
        for endpoint in endpoints.values():
            (directory / endpoint).unlink(missing_ok=True)
        own.rmdir()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--resources", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.dir, args.resources, args.count))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
