"""The kubelet stand-in's device managers of 1.36 and 1.37 (``device_manager``): the wipe at
start, and which connections of a resource they keep (tests/standin/kubelet_endpoints.py)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import grpc
import pytest

from tests.standin.kubelet import KubeletStandin
from tests.standin.test_kubelet_standin import (
    RESOURCE,
    TWO_TOKENS,
    FakePlugin,
    _Lines,
    plugins,
    refusal,
    register,
    run_script,
    stale_socket,
)
from token_resource.protocol.deviceplugin import HEALTHY, UNHEALTHY

__all__ = ["plugins", "run_script"]  # fixtures, found by pytest under these names

ONE_TOKEN = (("token-9", HEALTHY),)
THREE_TOKENS = (*TWO_TOKENS, ("token-2", HEALTHY))


@pytest.fixture(params=["1.36", "1.37"])
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def kubelet(socket_dir: Path, release: str) -> KubeletStandin:
    return KubeletStandin(socket_dir, dial_timeout=5.0, device_manager=release)


@pytest.fixture
def standin_137(socket_dir: Path) -> Iterator[KubeletStandin]:
    with kubelet(socket_dir, "1.37") as standin:
        yield standin


def test_from_1_33_a_starting_kubelet_wipes_only_sockets(socket_dir: Path, release: str) -> None:
    """CleanupPluginDirectory with os.Stat: sockets and symlinks resolving to one go; regular
    files, dangling symlinks, symlinks to a file or directory, subdirectories stay."""
    stale_socket(socket_dir / "plugin.sock")
    stale_socket(socket_dir / "sub-socket")
    (socket_dir / "socket-link").symlink_to(socket_dir / "sub-socket")
    (socket_dir / "token-resource.lock").write_text("1234\n")
    (socket_dir / "file-link").symlink_to(socket_dir / "token-resource.lock")
    (socket_dir / "dangling").symlink_to(socket_dir / "nowhere")
    (socket_dir / "sub").mkdir()
    stale_socket(socket_dir / "sub" / "inside.sock")
    (socket_dir / "sub-link").symlink_to(socket_dir / "sub")
    (socket_dir / "kubelet_internal_checkpoint").write_text("{}")
    with kubelet(socket_dir, release):
        assert sorted(path.name for path in socket_dir.iterdir()) == [
            "dangling",
            "file-link",
            "kubelet.sock",
            "kubelet_internal_checkpoint",
            "sub",
            "sub-link",
            "token-resource.lock",
        ]
        assert (socket_dir / "sub" / "inside.sock").is_socket()


def test_1_36_a_replaced_client_streams_on_and_its_end_disconnects_its_successor(
    socket_dir: Path, plugins: Callable[..., FakePlugin]
) -> None:
    """handler.go keeps one client per resource name: a Register forgets the old client but
    does not close it, and when its stream ends, runClient disconnects the new one."""
    with kubelet(socket_dir, "1.36") as standin:
        old = plugins("old.sock")
        new = plugins("new.sock", ONE_TOKEN)
        register(standin.socket_path, "old.sock")
        standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
        register(standin.socket_path, "new.sock")
        new.wait_open_streams(1)
        old.wait_open_streams(1)  # not cancelled
        view = standin.wait_for(lambda v: v.resources[RESOURCE].devices == ONE_TOKEN)
        assert (view.resources[RESOURCE].endpoint, view.resources[RESOURCE].endpoints) == (
            "new.sock",
            ("new.sock",),
        )
        old.set_devices(THREE_TOKENS)  # the forgotten client's lists still count
        standin.wait_for(lambda v: v.counts() == {RESOURCE: 3})

        old.stop()
        new.wait_open_streams(0)  # closed by the kubelet, though its plugin still serves
        view = standin.wait_for(lambda v: not v.resources[RESOURCE].stream_open)
        assert view.counts() == {RESOURCE: 0}
        assert view.resources[RESOURCE].endpoints == ()
        with pytest.raises(LookupError):
            standin.allocate(RESOURCE, ["token-9"])


def test_1_37_keeps_every_endpoint_and_calls_the_newest(
    standin_137: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    first = plugins("first.sock")
    second = plugins("second.sock", ONE_TOKEN)
    register(standin_137.socket_path, "first.sock")
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    register(standin_137.socket_path, "second.sock")
    second.wait_open_streams(1)
    first.wait_open_streams(1)
    view = standin_137.wait_for(lambda v: v.resources[RESOURCE].devices == ONE_TOKEN)
    token = view.resources[RESOURCE]
    assert (token.endpoint, token.endpoints, token.registrations) == (
        "second.sock",
        ("first.sock", "second.sock"),
        2,
    )
    standin_137.allocate(RESOURCE, ["token-9"])
    assert (len(first.allocations), len(second.allocations)) == (0, 1)
    # Every endpoint's list replaces the resource's devices: the last one wins.
    first.set_devices(THREE_TOKENS)
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 3})
    second.set_devices([("token-9", UNHEALTHY)])
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 0})


def test_1_37_promotes_a_remaining_endpoint_and_only_the_last_end_counts(
    standin_137: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    first = plugins("first.sock", THREE_TOKENS)
    second = plugins("second.sock", ONE_TOKEN)
    register(standin_137.socket_path, "first.sock")
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 3})
    register(standin_137.socket_path, "second.sock")
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 1})

    second.stop()
    view = standin_137.wait_for(lambda v: v.resources[RESOURCE].endpoints == ("first.sock",))
    token = view.resources[RESOURCE]
    # No markResourceUnhealthy: the devices of the last list (the gone one's) stay allocatable.
    assert (token.endpoint, token.stream_open, token.devices) == ("first.sock", True, ONE_TOKEN)
    assert view.counts() == {RESOURCE: 1}
    standin_137.allocate(RESOURCE, ["token-0"])
    assert len(first.allocations) == 1

    first.stop()
    view = standin_137.wait_for(lambda v: not v.resources[RESOURCE].stream_open)
    assert (view.counts(), view.resources[RESOURCE].endpoints) == ({RESOURCE: 0}, ())


def test_1_37_refuses_a_path_still_connected_and_keeps_it_stale_until_a_restart(
    socket_dir: Path, standin_137: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    """The trap: the refusal's deregisterClient forgets the live client too, so the end of
    its stream disconnects nothing; the path stays connected for the kubelet's lifetime."""
    plugin = plugins("token.sock")
    register(standin_137.socket_path, "token.sock")
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    already = f"device plugin already connected: {socket_dir / 'token.sock'}"
    with pytest.raises(grpc.RpcError) as error:
        register(standin_137.socket_path, "token.sock")
    assert refusal(error) == already
    assert standin_137.snapshot().rejected == (already,)

    plugin.wait_open_streams(1)  # the live stream delivers on
    plugin.set_devices(THREE_TOKENS)
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 3})
    plugin.stop()
    view = standin_137.wait_for(lambda v: v.resources[RESOURCE].stale_endpoints == ("token.sock",))
    token = view.resources[RESOURCE]
    assert (token.stream_open, token.endpoints, view.counts()) == (
        True,
        ("token.sock",),
        {RESOURCE: 3},
    )

    plugins("token.sock")  # the plugin serves again on the same path: refused all the same
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as error:
            register(standin_137.socket_path, "token.sock")
        assert refusal(error) == already
    # Another path is accepted (and becomes the current endpoint) ...
    plugins("other.sock", ONE_TOKEN)
    register(standin_137.socket_path, "other.sock")
    view = standin_137.wait_for(lambda v: v.resources[RESOURCE].devices == ONE_TOKEN)
    assert view.resources[RESOURCE].endpoints == ("token.sock", "other.sock")
    # ... and only a restart forgets the stale one.
    standin_137.restart()
    plugins("token.sock")
    register(standin_137.socket_path, "token.sock")
    view = standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    assert (view.resources[RESOURCE].endpoints, view.resources[RESOURCE].stale_endpoints) == (
        ("token.sock",),
        (),
    )


def test_1_37_a_path_that_disconnected_may_register_again(
    standin_137: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    """The safe way: the stream ended (its client was disconnected) before the Register."""
    plugin = plugins("token.sock")
    register(standin_137.socket_path, "token.sock")
    standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    plugin.stop()
    standin_137.wait_for(lambda v: not v.resources[RESOURCE].stream_open)
    plugins("token.sock")
    register(standin_137.socket_path, "token.sock")
    view = standin_137.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    assert view.rejected == ()
    assert view.resources[RESOURCE].registrations == 2


def test_a_register_first_kubelet_is_only_a_1_32_one(socket_dir: Path) -> None:
    with pytest.raises(ValueError, match="register_first"):
        KubeletStandin(socket_dir, register_first=True, device_manager="1.37")
    with pytest.raises(ValueError, match="device_manager"):
        KubeletStandin(socket_dir, device_manager="1.35")


def test_script_mode_takes_the_device_manager(
    socket_dir: Path,
    plugins: Callable[..., FakePlugin],
    run_script: Callable[..., tuple[subprocess.Popen[str], _Lines]],
) -> None:
    (socket_dir / "notes.txt").write_text("kept by a 1.37 kubelet")
    process, lines = run_script("--device-manager", "1.37")
    lines.expect("(generation 1)")
    assert (socket_dir / "notes.txt").exists()
    plugins("token.sock")
    register(socket_dir / "kubelet.sock", "token.sock")
    lines.expect("registered example.com/token via token.sock")
    with pytest.raises(grpc.RpcError) as error:
        register(socket_dir / "kubelet.sock", "token.sock")
    assert refusal(error).startswith("device plugin already connected: ")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
