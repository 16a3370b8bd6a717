"""The reconcile step in-process: config diffs in, plugin servers (real sockets) out."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import MappingProxyType

from token_resource.config.model import AgentSettings, Config, ResourceSpec
from token_resource.kubelet.reconciler import PluginState, Reconciler
from token_resource.kubelet.sockets import SUBDIRECTORY


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
