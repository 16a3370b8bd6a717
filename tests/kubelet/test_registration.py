"""Registrations leave no connection to the kubelet behind once the kubelet is gone, even
where gRPC keeps finished calls in reference cycles (grpcio 1.46) and the cyclic garbage
collector does not run by itself."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

import grpc

from tests.standin.kubelet import KubeletStandin, serves_exactly
from token_resource.config.model import ResourceSpec
from token_resource.kubelet.reconciler import Reconciler
from token_resource.kubelet.registration import KubeletClient, RegistrationError
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import KUBELET_SOCKET, registration_handler

RESOURCES = MappingProxyType(
    {
        f"example.com/{name}": ResourceSpec(
            name=f"example.com/{name}", count=2, env=f"ENV_{name.upper()}", source=Path("t")
        )
        for name in "abcd"
    }
)


def dead_connections() -> list[str]:
    """This process's client ends (no address) of unix stream connections whose other end is
    closed (``ss``: peer 0): connections to a kubelet that is gone."""
    listing = subprocess.run(
        ["ss", "--unix", "--all", "--processes"], capture_output=True, text=True, check=True
    ).stdout
    return [
        line
        for line in listing.splitlines()
        if f"pid={os.getpid()}," in line and line.split()[1:8:3] == ["ESTAB", "*", "0"]
    ]


@contextmanager
def no_automatic_garbage_collection() -> Iterator[None]:
    """A quiet agent may not run the cyclic collector for hours; here it never does."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def kubelet_that_never_answers(directory: Path) -> Iterator[list[bool]]:
    """A Registration service whose Register blocks until the service stops; yields a list
    that gets an item for each call received."""
    release = threading.Event()
    calls: list[bool] = []

    def hang(request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        calls.append(True)
        release.wait(60)
        return pb.Empty()

    server = grpc.server(ThreadPoolExecutor(8))
    server.add_generic_rpc_handlers((registration_handler(hang),))
    server.add_insecure_port(f"unix:{directory / KUBELET_SOCKET}")
    server.start()
    try:
        yield calls
    finally:
        stopped = server.stop(None)  # the calls in flight end, unanswered
        release.set()
        stopped.wait()
        (directory / KUBELET_SOCKET).unlink(missing_ok=True)


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} after {timeout} s"
        await asyncio.sleep(0.02)


def test_registrations_cut_off_by_a_stopping_kubelet_leave_no_connection(
    device_plugin_dir: Path,
) -> None:
    async def scenario() -> None:
        reconciler = Reconciler(device_plugin_dir, lambda: None)
        with kubelet_that_never_answers(device_plugin_dir) as calls:
            await reconciler.apply(RESOURCES)
            await until(lambda: calls.count(True) == len(RESOURCES), "all registering")
        reconciler.kubelet_stopped()
        await until(lambda: not dead_connections(), f"closed: {dead_connections()}")
        await reconciler.close()

    with no_automatic_garbage_collection():
        asyncio.run(scenario())


def test_registrations_with_a_kubelet_that_then_stops_leave_no_connection(
    device_plugin_dir: Path,
) -> None:
    async def scenario() -> None:
        reconciler = Reconciler(device_plugin_dir, lambda: None)
        kubelet = KubeletStandin(device_plugin_dir)
        kubelet.start()
        try:
            await reconciler.apply(RESOURCES)
            await until(lambda: all(s.registered for s in reconciler.states()), "registered")
            counts = {name: 2 for name in RESOURCES}
            await until(lambda: serves_exactly(counts)(kubelet.snapshot()), "served")
        finally:
            # In a thread: the stand-in's stop waits for its streams, which this loop serves.
            await asyncio.get_running_loop().run_in_executor(None, kubelet.stop)
        reconciler.kubelet_stopped()
        await until(lambda: not dead_connections(), f"closed: {dead_connections()}")
        await reconciler.close()

    with no_automatic_garbage_collection():
        asyncio.run(scenario())


def test_registers_failed_by_a_stopping_kubelet_leave_no_connection(
    device_plugin_dir: Path,
) -> None:
    """grpcio 1.46 keeps a call that failed in a reference cycle with its connection; closing
    the channel alone did not free it (one connection to a dead kubelet per restart)."""

    async def scenario() -> None:
        client = KubeletClient(device_plugin_dir / KUBELET_SOCKET)
        with kubelet_that_never_answers(device_plugin_dir) as calls:
            registers = [
                asyncio.ensure_future(client.register(f"{name}.sock", name)) for name in RESOURCES
            ]
            await until(lambda: calls.count(True) == len(RESOURCES), "all registering")
        failures = await asyncio.gather(*registers, return_exceptions=True)
        assert all(isinstance(failure, RegistrationError) for failure in failures), failures
        await client.close()
        await until(lambda: not dead_connections(), f"closed: {dead_connections()}")

    with no_automatic_garbage_collection():
        asyncio.run(scenario())
