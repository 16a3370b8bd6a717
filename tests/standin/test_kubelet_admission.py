"""The kubelet stand-in's start as a real kubelet goes through it: kubelet.sock a moment after
the start, then the admission of the node's pods, which rejects a pod whose resource has no
healthy devices yet (after a reboot), and leaves running pods alone (after a restart)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.standin.admission import (
    FAILED,
    RUNNING,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    PodStore,
    RuntimeState,
    devices_to_allocate,
)
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.test_kubelet_standin import TIMEOUT, FakePlugin, _Lines, register
from token_resource.protocol.deviceplugin import HEALTHY, UNHEALTHY

TOKEN = "example.com/token"
LICENSE = "example.com/license"
REPO = Path(__file__).resolve().parents[2]
# Never reached by time: these tests say when the Node has synced (sync_node()).
NEVER = 3600.0
NO_HEALTHY_DEVICE = (
    f"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
    f"{TOKEN}, which is unexpected"
)


# --- the device manager's rules ----------------------------------------------------------------


def allocate(
    required: int = 1,
    previous: tuple[str, ...] | None = None,
    registered: bool = True,
    healthy: tuple[str, ...] = ("token-0", "token-1"),
    taken: tuple[str, ...] = (),
) -> tuple[str, ...]:
    return devices_to_allocate(
        TOKEN, required, previous=previous, registered=registered, healthy=healthy, taken=taken
    )


def test_a_new_pod_gets_free_healthy_devices_in_list_order() -> None:
    assert allocate() == ("token-0",)
    assert allocate(taken=("token-0",)) == ("token-1",)
    assert allocate(2) == ("token-0", "token-1")


def test_a_pod_with_devices_in_the_checkpoint_keeps_them_without_an_allocate_call() -> None:
    assert allocate(previous=("token-1",)) == ()


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"registered": False}, f"cannot allocate unregistered device {TOKEN}"),
        (
            {"healthy": ()},
            f"no healthy devices present; cannot allocate unhealthy devices {TOKEN}",
        ),
        # Health before the count: a pod known from the checkpoint is no exception.
        (
            {"healthy": (), "previous": ("token-0",)},
            f"no healthy devices present; cannot allocate unhealthy devices {TOKEN}",
        ),
        (
            {"healthy": ("token-0",), "previous": ("token-7",)},
            "previously allocated devices are no longer healthy; "
            f"cannot allocate unhealthy devices {TOKEN}",
        ),
        (
            {"required": 2, "taken": ("token-0",)},
            f"requested number of devices unavailable for {TOKEN}. Requested: 2, Available: 1",
        ),
        (
            {"required": 2, "previous": ("token-0",)},
            f'changed request for resource "{TOKEN}" from 1 to 2',
        ),
    ],
)
def test_what_the_device_manager_refuses(arguments: dict[str, Any], error: str) -> None:
    with pytest.raises(AdmissionError) as refused:
        allocate(**arguments)
    assert str(refused.value) == error


# --- admission in the stand-in ------------------------------------------------------------------


@pytest.fixture
def pods_file(tmp_path: Path) -> Path:
    path = tmp_path / "pods.json"
    path.write_text(
        json.dumps(
            {
                "pods": {
                    "demo-0": {"resources": {TOKEN: 1}},
                    "demo-1": {"resources": {TOKEN: 1}},
                    "licensed": {"resources": {LICENSE: 1}},
                }
            }
        )
    )
    return path


@pytest.fixture
def plugins(socket_dir: Path) -> Iterator[Callable[..., FakePlugin]]:
    started: list[FakePlugin] = []

    def start(endpoint: str, devices: tuple[tuple[str, str], ...]) -> FakePlugin:
        started.append(FakePlugin(socket_dir / endpoint, devices))
        return started[-1]

    yield start
    for plugin in started:
        plugin.stop()


TWO = (("token-0", HEALTHY), ("token-1", HEALTHY))
ONE_LICENSE = (("license-0", HEALTHY),)


def kubelet(socket_dir: Path, pods_file: Path, runtime: RuntimeState) -> KubeletStandin:
    return KubeletStandin(socket_dir, pods=PodStore(pods_file), runtime=runtime, admit_after=NEVER)


def serve_and_register(
    standin: KubeletStandin,
    plugins: Callable[..., FakePlugin],
    token: tuple[tuple[str, str], ...] | None = TWO,
    license_: tuple[tuple[str, str], ...] | None = ONE_LICENSE,
) -> FakePlugin | None:
    """Like plugins serving anew once the starting kubelet wiped the directory: serve, register
    and wait for the first list of each given one. Returns the token plugin."""
    served = {}
    for name, endpoint, devices in (
        (TOKEN, "token.sock", token),
        (LICENSE, "license.sock", license_),
    ):
        if devices is not None:
            served[name] = plugins(endpoint, devices)
            register(standin.socket_path, endpoint, name)
    standin.wait_for(
        lambda v: all(v.resources[name].listed_at is not None for name in served), TIMEOUT
    )
    return served.get(TOKEN)


def admitted(standin: KubeletStandin) -> KubeletView:
    return standin.wait_for(lambda view: view.admitted_at is not None, TIMEOUT)


def statuses(pods_file: Path) -> dict[str, tuple[str, str]]:
    """The pods' phases and messages as the kubelet reported them to the "API"."""
    pods = json.loads(pods_file.read_text())["pods"]
    return {
        name: (pod["status"]["phase"], pod["status"]["message"])
        for name, pod in pods.items()
        if "status" in pod
    }


def test_the_first_start_allocates_every_pod_and_records_it_in_the_checkpoint(
    socket_dir: Path, pods_file: Path, plugins: Callable[..., FakePlugin]
) -> None:
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        token = serve_and_register(standin, plugins)
        standin.sync_node()
        view = admitted(standin)
    assert {name: status.phase for name, status in view.pods.items()} == {
        "demo-0": RUNNING,
        "demo-1": RUNNING,
        "licensed": RUNNING,
    }
    assert view.pods["demo-0"].devices == {TOKEN: ("token-0",)}
    assert view.pods["demo-1"].devices == {TOKEN: ("token-1",)}
    # The plugin's Allocate was called for each pod, with the devices the kubelet picked.
    assert token is not None
    asked = [list(r.container_requests[0].devices_ids) for r in token.allocations]
    assert asked == [["token-0"], ["token-1"]]
    checkpoint = json.loads((socket_dir / "kubelet_internal_checkpoint").read_text())
    assert checkpoint["pod_devices"] == {
        "demo-0": {TOKEN: ["token-0"]},
        "demo-1": {TOKEN: ["token-1"]},
        "licensed": {LICENSE: ["license-0"]},
    }
    assert checkpoint["registered_devices"][TOKEN] == ["token-0", "token-1"]
    assert statuses(pods_file)["demo-0"] == (RUNNING, "")


def test_after_a_reboot_a_resource_without_healthy_devices_loses_its_pods_for_good(
    socket_dir: Path, pods_file: Path, plugins: Callable[..., FakePlugin]
) -> None:
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        serve_and_register(standin, plugins)
        standin.sync_node()
        admitted(standin)
    # The reboot: no container runs (a fresh runtime state), the checkpoint is kept. Only the
    # license plugin is back when the kubelet admits.
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        serve_and_register(standin, plugins, token=None)
        standin.sync_node()
        view = admitted(standin)
    assert view.pods["demo-0"].phase == FAILED
    assert view.pods["demo-0"].reason == UNEXPECTED_ADMISSION_ERROR
    assert view.pods["demo-0"].message == NO_HEALTHY_DEVICE
    assert view.pods["licensed"].phase == RUNNING
    assert statuses(pods_file) == {
        "demo-0": (FAILED, NO_HEALTHY_DEVICE),
        "demo-1": (FAILED, NO_HEALTHY_DEVICE),
        "licensed": (RUNNING, ""),
    }
    checkpoint = json.loads((socket_dir / "kubelet_internal_checkpoint").read_text())
    assert set(checkpoint["pod_devices"]) == {"licensed"}
    # Failed is final: the next boot, with every plugin there, does not bring them back.
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        serve_and_register(standin, plugins)
        standin.sync_node()
        view = admitted(standin)
    assert set(view.pods) == {"licensed"}
    assert statuses(pods_file)["demo-0"] == (FAILED, NO_HEALTHY_DEVICE)


def test_after_a_reboot_plugins_listing_in_time_keep_every_pod_on_its_devices(
    socket_dir: Path, pods_file: Path, plugins: Callable[..., FakePlugin]
) -> None:
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        serve_and_register(standin, plugins)
        standin.sync_node()
        before = admitted(standin).pods
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        token = serve_and_register(standin, plugins)
        standin.sync_node()
        view = admitted(standin)
    assert {name: status.phase for name, status in view.pods.items()} == dict.fromkeys(
        before, RUNNING
    )
    assert {name: s.devices for name, s in view.pods.items()} == {
        name: s.devices for name, s in before.items()
    }
    # Known from the checkpoint: no new Allocate.
    assert token is not None
    assert token.allocations == []


def test_a_registered_plugin_that_has_not_listed_yet_has_no_healthy_device(
    socket_dir: Path, pods_file: Path, plugins: Callable[..., FakePlugin]
) -> None:
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        # Registered and listing, but nothing healthy.
        serve_and_register(standin, plugins, (), (("license-0", UNHEALTHY),))
        standin.sync_node()
        view = admitted(standin)
    assert {name: status.phase for name, status in view.pods.items()} == dict.fromkeys(
        ("demo-0", "demo-1", "licensed"), FAILED
    )
    assert view.pods["licensed"].message == NO_HEALTHY_DEVICE.replace(TOKEN, LICENSE)


def test_a_kubelet_restart_leaves_running_pods_alone(
    socket_dir: Path, tmp_path: Path, pods_file: Path, plugins: Callable[..., FakePlugin]
) -> None:
    runtime = RuntimeState(tmp_path / "run" / "containers.json")
    with kubelet(socket_dir, pods_file, runtime) as standin:
        serve_and_register(standin, plugins)
        standin.sync_node()
        admitted(standin)
    assert runtime.running() == {"demo-0", "demo-1", "licensed"}
    # A new kubelet process, the containers still running, no plugin registered: nothing to do.
    with kubelet(socket_dir, pods_file, RuntimeState(runtime.path)) as standin:
        standin.sync_node()
        view = admitted(standin)
    assert view.pods == {}
    assert {phase for phase, _ in statuses(pods_file).values()} == {RUNNING}


def test_kubelet_sock_and_the_admission_come_when_due_after_the_start(
    socket_dir: Path, pods_file: Path
) -> None:
    with KubeletStandin(
        socket_dir, pods=PodStore(pods_file), socket_after=0.3, admit_after=0.6
    ) as standin:
        view = admitted(standin)
    assert view.socket_at - view.started_at >= 0.3
    assert view.admitted_at is not None
    assert view.admitted_at - view.socket_at >= 0.6
    # Nobody registered: every pod is refused.
    assert {status.message for status in view.pods.values()} == {
        f"Allocate failed due to cannot allocate unregistered device {name}, which is unexpected"
        for name in (TOKEN, LICENSE)
    }


def test_a_kubelet_stopped_before_its_node_synced_decides_nothing(
    socket_dir: Path, pods_file: Path
) -> None:
    standin = kubelet(socket_dir, pods_file, RuntimeState(None))
    with standin:
        pass
    assert standin.snapshot().pods == {}
    assert statuses(pods_file) == {}


def test_an_unreadable_checkpoint_is_replaced(socket_dir: Path, pods_file: Path) -> None:
    (socket_dir / "kubelet_internal_checkpoint").write_text("{not json")
    with kubelet(socket_dir, pods_file, RuntimeState(None)) as standin:
        checkpoint = json.loads(standin.checkpoint_path.read_text())
    assert checkpoint == {"generation": 1, "registered_devices": {}, "pod_devices": {}}


# --- as a process ---------------------------------------------------------------------------


def test_script_mode_times_its_start_reports_and_can_leave_a_stale_socket(
    socket_dir: Path, tmp_path: Path, pods_file: Path
) -> None:
    state_file = tmp_path / "state.json"
    runtime_file = tmp_path / "run" / "containers.json"
    command = [
        sys.executable, "-m", "tests.standin.kubelet_script", "--dir", str(socket_dir),
        "--state-file", str(state_file), "--pods", str(pods_file),
        "--runtime-file", str(runtime_file),
        "--socket-after", "0.35", "--admit-after", "0.9", "--leave-socket",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
    )
    assert process.stdout is not None
    lines = _Lines(process.stdout)
    try:
        lines.expect("(generation 1)")
        # No plugin registers: every pod is rejected, and told so in the "API".
        lines.expect("pods admitted: 0, rejected: 3")
        state = json.loads(state_file.read_text())
        # Timed from the process's own start, as a real kubelet's start is.
        assert state["socket_at"] - state["started_at"] >= 0.35
        assert state["admitted_at"] - state["socket_at"] >= 0.9
        assert {pod["phase"] for pod in state["pods"].values()} == {FAILED}
        assert {phase for phase, _ in statuses(pods_file).values()} == {FAILED}
        assert json.loads(runtime_file.read_text()) == {"running": []}
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT) == 0
        lines.expect("leaving")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT)
        lines.close()
        process.stdout.close()
    # A socket file with nobody listening, as a node that went down left it.
    assert (socket_dir / "kubelet.sock").is_socket()
    with socket.socket(socket.AF_UNIX) as client, pytest.raises(ConnectionRefusedError):
        client.connect(str(socket_dir / "kubelet.sock"))


def test_kubelet_sock_accepts_connections_from_the_moment_it_appears(socket_dir: Path) -> None:
    """As after a real kubelet's net.Listen: a plugin that connects the moment it sees the file
    is not refused (and so not thrown into gRPC's reconnect backoff of a second or more)."""
    path = socket_dir / "kubelet.sock"
    outcomes: list[str] = []

    def connect_at_first_sight(deadline: float) -> None:
        while not path.exists():
            if time.monotonic() > deadline:
                outcomes.append("never appeared")
                return
        with socket.socket(socket.AF_UNIX) as client:
            try:
                client.connect(str(path))
                outcomes.append("connected")
            except ConnectionRefusedError:
                outcomes.append("refused")

    standin = KubeletStandin(socket_dir)
    for _ in range(50):
        watcher = threading.Thread(target=connect_at_first_sight, args=(time.monotonic() + 30,))
        watcher.start()
        standin.start()
        watcher.join(TIMEOUT)
        standin.stop()
    assert outcomes == ["connected"] * 50, outcomes
