"""The parts of two agent instances on one node that need no kubelet: their sockets' names, the
dead sockets an instance leaves, and the prepared claims they share under a lock."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import socket
from pathlib import Path

from tests.paths import short_temporary_directory
from token_resource.config.model import DraSettings
from token_resource.dra.prepared import LOCK_FILE, STATE_FILE, PreparedClaim, PreparedClaims
from token_resource.dra.registration import remove_dead_sockets, socket_paths, start_id

UID = "7b2d4c6e-1234-4f8a-8c1d-000000000002"


KUBELET = Path("/var/lib/kubelet")


def test_each_start_names_its_sockets_after_itself_and_its_instance_hashed_to_fit() -> None:
    settings = DraSettings(driver="tokens.example.com")  # the kubelet's own directories
    registration, service = socket_paths(settings, None, "0a1b2c3d")
    assert registration == KUBELET / "plugins_registry" / "tokens.example.com-0a1b2c3d-reg.sock"
    assert service == KUBELET / "plugins" / "tokens.example.com" / "dra-0a1b2c3d.sock"
    registration, service = socket_paths(settings, UID, "0a1b2c3d")
    assert registration == (
        KUBELET / "plugins_registry" / f"tokens.example.com-{UID}-0a1b2c3d-reg.sock"
    )
    assert service == KUBELET / "plugins" / "tokens.example.com" / f"dra-{UID}-0a1b2c3d.sock"
    deep = DraSettings(driver="long-driver-name.tokens.example.com")
    registration, service = socket_paths(deep, UID, "0a1b2c3d")
    assert UID not in registration.name
    assert registration.name.startswith(f"{deep.driver}-")
    assert len(os.fsencode(registration)) <= 107
    assert service.parent == deep.driver_dir
    assert len(os.fsencode(service)) <= 107
    assert socket_paths(deep, UID, "0a1b2c3d") == (registration, service)
    assert socket_paths(deep, UID, "0a1b2c3e")[0] != registration
    assert start_id() != start_id()


def test_sockets_nobody_serves_are_removed_and_the_others_kept() -> None:
    with short_temporary_directory("tr-dead-") as root:
        settings = DraSettings(
            driver="tokens.example.com",
            plugins_registry_dir=root / "reg",
            plugins_dir=root / "plugins",
        )
        settings.plugins_registry_dir.mkdir()
        settings.driver_dir.mkdir(parents=True)
        dead_registration = settings.plugins_registry_dir / f"{settings.driver}-old-reg.sock"
        dead_service = settings.driver_dir / "dra-old.sock"
        live = settings.plugins_registry_dir / f"{settings.driver}-new-reg.sock"
        other_driver = settings.plugins_registry_dir / "other.example.com-reg.sock"
        not_a_socket = settings.driver_dir / "dra-notes.sock"
        not_a_socket.write_text("")
        servers = []
        for path in (dead_registration, dead_service, live, other_driver):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            servers.append(server)
        servers[2].listen()
        for server in (servers[0], servers[1]):
            server.close()  # its file stays, as a killed agent's does
        try:
            removed = remove_dead_sockets(settings)
            assert sorted(removed) == sorted([dead_registration, dead_service])
            assert [path.exists() for path in (live, other_driver, not_a_socket)] == [True] * 3
            assert [path.exists() for path in (dead_registration, dead_service)] == [False] * 2
        finally:
            for server in servers:
                server.close()


def claim(uid: str) -> PreparedClaim:
    return PreparedClaim("default", f"claim-{uid}", uid, ("web",), ())


def test_a_change_waits_for_the_other_instance_and_starts_from_what_it_wrote(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        ours = PreparedClaims(tmp_path)
        theirs = PreparedClaims(tmp_path)
        async with ours.changing():
            ours.add(claim("a"))
        # The other instance holds the lock (another open file: flock excludes it even here).
        other = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
        fcntl.flock(other, fcntl.LOCK_EX)
        entered = asyncio.Event()

        async def change() -> None:
            async with ours.changing():
                entered.set()
                ours.add(claim("c"))

        task = asyncio.ensure_future(change())
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert not entered.is_set()
        theirs.load()
        theirs.add(claim("b"))  # its change, made while it holds the lock
        os.close(other)
        await task
        document = json.loads((tmp_path / STATE_FILE).read_text())
        assert sorted(document["claims"]) == ["a", "b", "c"]
        assert sorted(ours) == ["a", "b", "c"]

    asyncio.run(scenario())
