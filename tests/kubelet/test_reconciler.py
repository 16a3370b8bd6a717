"""The reconcile step in-process: config diffs in, plugin servers (real sockets) out."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from types import MappingProxyType

from tests.kubelet.test_registration import until
from tests.standin.kubelet import KubeletStandin, serves_exactly
from token_resource.config.model import AgentSettings, Config, ResourceSpec
from token_resource.host.fswatch import FileEvent
from token_resource.kubelet.reconciler import PluginState, Reconciler
from token_resource.kubelet.sockets import SUBDIRECTORY
from token_resource.protocol.deviceplugin import KUBELET_SOCKET


def config(directory: Path, **counts: int) -> Config:
    resources = {
        f"example.com/{name}": ResourceSpec(
            name=f"example.com/{name}", count=count, env=f"ENV_{name.upper()}", source=Path("t")
        )
        for name, count in counts.items()
    }
    return Config(AgentSettings(directory), MappingProxyType(resources), ())


def test_apply_starts_updates_and_stops_only_what_changed(device_plugin_dir: Path) -> None:
    changes: list[int] = []

    async def scenario() -> None:
        reconciler = Reconciler(device_plugin_dir, lambda: changes.append(1))
        first = config(device_plugin_dir, a=1, b=2)
        assert await reconciler.apply(first.resources) == []
        assert reconciler.states() == [
            PluginState("example.com/a", 1, registered=False),
            PluginState("example.com/b", 2, registered=False),
        ]
        sockets = device_plugin_dir / SUBDIRECTORY
        inode_a = os.lstat(sockets / "example.com_a.sock").st_ino

        second = config(device_plugin_dir, a=1, b=5, c=0)
        await reconciler.apply(second.resources)
        assert [(s.name, s.count) for s in reconciler.states()] == [
            ("example.com/a", 1),
            ("example.com/b", 5),
            ("example.com/c", 0),
        ]
        # Untouched: the same socket file, never re-created.
        assert os.lstat(sockets / "example.com_a.sock").st_ino == inode_a

        await reconciler.apply(config(device_plugin_dir, c=0).resources)
        assert [s.name for s in reconciler.states()] == ["example.com/c"]
        assert sorted(p.name for p in sockets.iterdir()) == ["example.com_c.sock"]
        await reconciler.close()
        assert list(sockets.iterdir()) == []

    asyncio.run(scenario())
    assert changes


def test_a_lost_socket_is_served_again(device_plugin_dir: Path) -> None:
    async def scenario() -> None:
        reconciler = Reconciler(device_plugin_dir, lambda: None)
        await reconciler.apply(config(device_plugin_dir, a=1).resources)
        path = device_plugin_dir / SUBDIRECTORY / "example.com_a.sock"
        path.unlink()
        reconciler.socket_removed(path)
        for _ in range(500):
            if path.exists():
                break
            await asyncio.sleep(0.01)
        assert path.exists()
        # No kubelet here: serving again, waiting for kubelet.sock to register.
        assert reconciler.states() == [PluginState("example.com/a", 1, registered=False)]
        await reconciler.close()

    asyncio.run(scenario())


def test_a_resource_that_cannot_be_served_is_reported_and_tried_again(
    device_plugin_dir: Path,
) -> None:
    async def scenario() -> None:
        reconciler = Reconciler(device_plugin_dir, lambda: None)
        # A directory where the socket should go: the bind fails.
        blocker = device_plugin_dir / SUBDIRECTORY / "example.com_a.sock"
        blocker.mkdir(parents=True)
        failures = await reconciler.apply(config(device_plugin_dir, a=1, b=1).resources)
        assert len(failures) == 1
        assert failures[0].startswith("example.com/a: cannot serve: ")
        assert [state.name for state in reconciler.states()] == ["example.com/b"]
        blocker.rmdir()
        assert await reconciler.apply(config(device_plugin_dir, a=1, b=1).resources) == []
        assert [state.name for state in reconciler.states()] == ["example.com/a", "example.com/b"]
        await reconciler.close()

    asyncio.run(scenario())


def test_the_late_events_of_a_kubelet_already_registered_with_register_nothing_again(
    device_plugin_dir: Path,
) -> None:
    # After a reboot: the old kubelet's socket refuses, the agent probes it now and then, and a
    # probe can reach the new kubelet before the file events of its arrival are read (CI saw
    # it under load: every resource registered, then all again on the late events).
    kubelet_socket = device_plugin_dir / KUBELET_SOCKET
    with socket.socket(socket.AF_UNIX) as old:
        old.bind(str(kubelet_socket))

    async def scenario() -> None:
        reconciler = Reconciler(device_plugin_dir, lambda: None)
        kubelet = KubeletStandin(device_plugin_dir)
        loop = asyncio.get_running_loop()
        try:
            await reconciler.apply(config(device_plugin_dir, a=1).resources)
            await loop.run_in_executor(None, kubelet.start)  # replaces kubelet.sock
            await until(lambda: reconciler.states()[0].registered, "registered")
            # The events, read only now: the old kubelet.sock gone, the new one renamed there.
            reconciler.on_file_event(FileEvent("deleted", kubelet_socket, False))
            binding = device_plugin_dir / f".{KUBELET_SOCKET}.binding"
            reconciler.on_file_event(FileEvent("moved", binding, False, kubelet_socket))
            assert reconciler.states() == [PluginState("example.com/a", 1, registered=True)]
            view = await loop.run_in_executor(
                None, kubelet.wait_for, serves_exactly({"example.com/a": 1})
            )
            assert view.resources["example.com/a"].registrations == 1, view.pretty()
        finally:
            await loop.run_in_executor(None, kubelet.stop)
            await reconciler.close()

    asyncio.run(scenario())
