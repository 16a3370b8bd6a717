from __future__ import annotations

import socket
from pathlib import Path

import pytest

from token_resource.kubelet.sockets import (
    MAX_SOCKET_PATH,
    SocketPathError,
    is_agent_socket,
    remove_stale_sockets,
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


def test_stale_removal_touches_only_our_sockets(socket_dir: Path) -> None:
    sockets = []
    for name in ("token-resource.example.com_token.sock", "kubelet.sock", "other.sock"):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(socket_dir / name))
        sockets.append(sock)
    (socket_dir / "token-resource.lock").write_text("1\n")
    (socket_dir / "token-resource.file.sock").write_text("not a socket")
    try:
        assert remove_stale_sockets(socket_dir) == ["token-resource.example.com_token.sock"]
        assert sorted(path.name for path in socket_dir.iterdir()) == [
            "kubelet.sock",
            "other.sock",
            "token-resource.file.sock",
            "token-resource.lock",
        ]
        assert not is_agent_socket(socket_dir / "token-resource.file.sock")
    finally:
        for sock in sockets:
            sock.close()
