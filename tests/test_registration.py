"""Registration calls that fail or are cancelled leave no connection to the kubelet behind."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from token_resource.protocol import KUBELET_SOCKET, registration_handler
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.registration import RegistrationError, register

# /proc/net/unix: a connected socket (SS_CONNECTED) has state 03.
_CONNECTED = "03"


def connected_unbound_sockets() -> set[str]:
    """Inodes of this process's connected unix sockets with no address: client ends, and
    gRPC's internal socket pairs (which are made once and stay)."""
    own = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if link.startswith("socket:["):
            own.add(link[len("socket:[") : -1])
    found = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[6] in own and fields[5] == _CONNECTED and len(fields) == 7:
            found.add(fields[6])
    return found


@contextmanager
def kubelet_that_never_answers(directory: Path) -> Iterator[threading.Event]:
    """A Registration service whose Register blocks until the returned event is set."""
    release = threading.Event()

    def hang(request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        release.wait(30)
        return pb.Empty()

    server = grpc.server(ThreadPoolExecutor(8))
    server.add_generic_rpc_handlers((registration_handler(hang),))
    server.add_insecure_port(f"unix:{directory / KUBELET_SOCKET}")
    server.start()
    try:
        yield release
    finally:
        stopped = server.stop(None)
        release.set()
        stopped.wait()


@contextmanager
def no_cyclic_garbage_collection() -> Iterator[None]:
    """The agent may not run the cyclic collector for hours; here it does not run at all."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def wait_until_closed(sockets: set[str], timeout: float = 20.0) -> set[str]:
    """Which of ``sockets`` are still open after ``timeout`` (gRPC closes them on its thread)."""
    deadline = time.monotonic() + timeout
    while (still := sockets & connected_unbound_sockets()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return still


@pytest.mark.parametrize("ending", ["kubelet stopped", "registration cancelled"])
def test_an_unfinished_registration_releases_its_connection(
    device_plugin_dir: Path, ending: str
) -> None:
    rounds = 10

    async def scenario() -> set[str]:
        opened: set[str] = set()
        for round_number in range(rounds):
            before = connected_unbound_sockets()
            with kubelet_that_never_answers(device_plugin_dir):
                calls = [
                    asyncio.ensure_future(
                        register(device_plugin_dir, "x.sock", f"example.com/r{round_number}-{i}")
                    )
                    for i in range(4)
                ]
                # Every call is on the wire (connected, waiting for the answer) before it ends.
                deadline = time.monotonic() + 20
                while len(connected_unbound_sockets() - before) < 1:
                    assert time.monotonic() < deadline, "no connection to the kubelet was made"
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                opened |= connected_unbound_sockets() - before
                if ending == "registration cancelled":
                    for call in calls:
                        call.cancel()
                    results = await asyncio.gather(*calls, return_exceptions=True)
                    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
            if ending == "kubelet stopped":
                results = await asyncio.gather(*calls, return_exceptions=True)
                assert all(isinstance(r, RegistrationError) for r in results), results
            del calls, results
        return opened

    with no_cyclic_garbage_collection():
        opened = asyncio.run(scenario())
        assert opened, "the test saw no connection to close"
        assert wait_until_closed(opened) == set()
