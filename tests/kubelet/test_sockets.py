from __future__ import annotations

import socket
from pathlib import Path

import pytest

from token_resource.kubelet.sockets import (
    MAX_SOCKET_PATH,
    SUBDIRECTORY,
    SocketLayout,
    SocketPathError,
    is_agent_socket,
    remove_stale_sockets,
    remove_subdirectory,
    socket_name,
)

KUBELET_DIR = Path("/var/lib/kubelet/device-plugins")


def test_names_are_readable_stable_and_distinct() -> None:
    assert socket_name("example.com/token", KUBELET_DIR) == "token-resource.example.com_token.sock"
    # A domain cannot hold "_", so the first "_" marks where the "/" was.
    assert socket_name("a.b/c", KUBELET_DIR) != socket_name("a/b.c", KUBELET_DIR)
    assert socket_name("acme/a_b", KUBELET_DIR) == "token-resource.acme_a_b.sock"


def test_long_names_are_shortened_with_a_hash_and_fit_a_unix_socket_path() -> None:
    long_a = "a" * 200 + ".example.com/" + "x" * 63
    long_b = "a" * 200 + ".example.com/" + "y" * 63
    name_a, name_b = socket_name(long_a, KUBELET_DIR), socket_name(long_b, KUBELET_DIR)
    assert name_a != name_b
    assert name_a == socket_name(long_a, KUBELET_DIR)
    for name in (name_a, name_b):
        assert name.startswith("token-resource.")
        assert name.endswith(".sock")
        assert len(str(KUBELET_DIR / name)) == MAX_SOCKET_PATH


def test_a_directory_too_long_for_any_socket_name_is_an_error() -> None:
    with pytest.raises(SocketPathError, match="too long for unix socket paths"):
        socket_name("example.com/token", Path("/" + "d" * 90))


def test_the_layouts_endpoints_and_the_names_they_own() -> None:
    inside = SocketLayout(KUBELET_DIR)
    assert inside.directory == KUBELET_DIR / "token-resource"
    assert inside.endpoint("example.com/token") == "token-resource/example.com_token.sock"
    assert inside.owns("example.com_token.sock")
    assert not inside.owns("notes.txt")
    beside = SocketLayout(KUBELET_DIR, subdirectory=False)
    assert beside.directory == KUBELET_DIR
    assert beside.endpoint("example.com/token") == "token-resource.example.com_token.sock"
    assert beside.owns("token-resource.example.com_token.sock")
    assert not beside.owns("kubelet.sock")
    # The directory's name counts against the 107 bytes as the prefix does beside it.
    long_name = "a" * 200 + ".example.com/" + "x" * 63
    for layout in (inside, beside):
        assert len(str(KUBELET_DIR / layout.endpoint(long_name))) == MAX_SOCKET_PATH


def test_an_instance_puts_itself_and_a_refused_names_generation_in_every_name() -> None:
    uid = "7b2d4c6e-1234-4f8a-8c1d-000000000002"
    inside = SocketLayout(KUBELET_DIR, instance=uid)
    assert inside.endpoint("example.com/token") == f"token-resource/example.com_token-{uid}.sock"
    # A pod UID just fits the kubelet's directory; with a generation the name is hashed.
    assert len(str(KUBELET_DIR / inside.endpoint("example.com/token"))) == MAX_SOCKET_PATH - 1
    assert uid not in inside.endpoint("example.com/token", 2)
    assert SocketLayout(KUBELET_DIR, instance="pod-a").endpoint("example.com/token", 2) == (
        "token-resource/example.com_token-pod-a.2.sock"
    )
    assert SocketLayout(KUBELET_DIR).endpoint("example.com/token", 3) == (
        "token-resource/example.com_token.3.sock"
    )
    assert inside.owns(f"example.com_token-{uid}.sock")
    beside = SocketLayout(KUBELET_DIR, subdirectory=False, instance=uid)
    assert beside.endpoint("example.com/token") == f"token-resource.example.com_token-{uid}.sock"
    # Too long with the instance: hashed, with the instance and the generation in the hash.
    name = "a" * 20 + ".example.com/token"
    endpoints = {
        SocketLayout(KUBELET_DIR, instance=instance).endpoint(name, generation)
        for instance in (uid, uid + "x")
        for generation in (1, 2)
    }
    assert len(endpoints) == 4
    for endpoint in endpoints:
        assert uid not in endpoint
        assert len(str(KUBELET_DIR / endpoint)) == MAX_SOCKET_PATH


def test_beside_another_instance_only_dead_sockets_are_removed(socket_dir: Path) -> None:
    subdirectory = socket_dir / SUBDIRECTORY
    subdirectory.mkdir()
    live, dead = (
        subdirectory / "example.com_token-new.sock",
        subdirectory / "example.com_token-old.sock",
    )
    sockets = []
    for path in (live, dead, socket_dir / "token-resource.example.com_token-old.sock"):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sockets.append(sock)
    sockets[0].listen()  # the other instance, serving; the others were killed
    try:
        assert remove_stale_sockets(socket_dir, only_dead=True) == [
            "token-resource.example.com_token-old.sock",
            "token-resource/example.com_token-old.sock",
        ]
        assert [path.name for path in subdirectory.iterdir()] == [live.name]
        assert remove_stale_sockets(socket_dir) == ["token-resource/example.com_token-new.sock"]
    finally:
        for sock in sockets:
            sock.close()


def test_stale_removal_touches_only_our_sockets(socket_dir: Path) -> None:
    subdirectory = socket_dir / SUBDIRECTORY
    subdirectory.mkdir()
    sockets = []
    for path in (
        socket_dir / "token-resource.example.com_token.sock",
        socket_dir / "kubelet.sock",
        socket_dir / "other.sock",
        subdirectory / "example.com_license.sock",
    ):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sockets.append(sock)
    (socket_dir / "token-resource.lock").write_text("1\n")
    (socket_dir / "token-resource.file.sock").write_text("not a socket")
    (subdirectory / "notes.txt").write_text("not a socket either")
    try:
        assert remove_stale_sockets(socket_dir) == [
            "token-resource.example.com_token.sock",
            "token-resource/example.com_license.sock",
        ]
        assert sorted(path.name for path in socket_dir.iterdir()) == [
            "kubelet.sock",
            "other.sock",
            "token-resource",
            "token-resource.file.sock",
            "token-resource.lock",
        ]
        assert [path.name for path in subdirectory.iterdir()] == ["notes.txt"]
        assert not is_agent_socket(socket_dir / "token-resource.file.sock")
        # A directory with something else in it is left at stop; an empty one goes.
        remove_subdirectory(socket_dir)
        assert subdirectory.is_dir()
        (subdirectory / "notes.txt").unlink()
        remove_subdirectory(socket_dir)
        assert not subdirectory.exists()
    finally:
        for sock in sockets:
            sock.close()


def test_stale_removal_makes_the_agents_directory(socket_dir: Path) -> None:
    assert remove_stale_sockets(socket_dir) == []
    assert (socket_dir / SUBDIRECTORY).is_dir()
    assert (socket_dir / SUBDIRECTORY).stat().st_mode & 0o007 == 0  # none for others
