"""The kubelet stand-in enforces the real kubelet's rules, proved against a tiny test plugin."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Callable

import grpc
import pytest

from tests.standin import kubelet as kubelet_module
from tests.standin.kubelet import KubeletStandin, KubeletView, Options, is_extended_resource_name
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import (
    DEVICE_PLUGIN_SERVICE,
    HEALTHY,
    REGISTER,
    UNHEALTHY,
    VERSION,
)

RESOURCE = "example.com/token"
REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests.standin.kubelet_script"
TWO_TOKENS = (("token-0", HEALTHY), ("token-1", HEALTHY))
PLUGIN_OPTIONS = pb.DevicePluginOptions(get_preferred_allocation_available=True)
TIMEOUT = 30.0


class FakePlugin:
    """A device plugin on a unix socket: a replaceable device list, echoing Allocate."""

    def __init__(self, path: Path, devices: Sequence[tuple[str, str]] = TWO_TOKENS) -> None:
        self.path = path
        self.allocations: list[pb.AllocateRequest] = []
        self._cond = threading.Condition()
        self._devices = tuple(devices)
        self._version = 0  # bumped by set_devices, so that every stream sends the new list
        self._open_streams = 0
        self._executor = ThreadPoolExecutor(8)
        self._server = grpc.server(self._executor, handlers=[self._handler()])
        self._server.add_insecure_port(f"unix:{path}")
        self._server.start()

    def stop(self) -> None:
        self._server.stop(None).wait()
        self._executor.shutdown(wait=True)

    def set_devices(self, devices: Sequence[tuple[str, str]]) -> None:
        with self._cond:
            self._devices = tuple(devices)
            self._version += 1
            self._cond.notify_all()

    def wait_open_streams(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self._open_streams == count, TIMEOUT), (
                f"{self.path.name}: {self._open_streams} open streams, expected {count}"
            )

    def _handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        return grpc.method_handlers_generic_handler(
            DEVICE_PLUGIN_SERVICE,
            {
                "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                    lambda request, context: PLUGIN_OPTIONS,
                    request_deserializer=pb.Empty.FromString,
                    response_serializer=pb.DevicePluginOptions.SerializeToString,
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self._list_and_watch,
                    request_deserializer=pb.Empty.FromString,
                    response_serializer=pb.ListAndWatchResponse.SerializeToString,
                ),
                "Allocate": grpc.unary_unary_rpc_method_handler(
                    self._allocate,
                    request_deserializer=pb.AllocateRequest.FromString,
                    response_serializer=pb.AllocateResponse.SerializeToString,
                ),
                "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                    _prefer,
                    request_deserializer=pb.PreferredAllocationRequest.FromString,
                    response_serializer=pb.PreferredAllocationResponse.SerializeToString,
                ),
            },
        )

    def _list_and_watch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        context.add_callback(self._wake)  # cancelled by the kubelet, or the server stops
        with self._cond:
            self._open_streams += 1
            self._cond.notify_all()
        try:
            version = -1
            while (update := self._next_list(version, context)) is not None:
                version, devices = update
                yield pb.ListAndWatchResponse(
                    devices=[
                        pb.Device(ID=device_id, health=health) for device_id, health in devices
                    ]
                )
        finally:
            with self._cond:
                self._open_streams -= 1
                self._cond.notify_all()

    def _next_list(
        self, sent: int, context: grpc.ServicerContext
    ) -> tuple[int, tuple[tuple[str, str], ...]] | None:
        """Block until the device list differs from version ``sent``; None once the RPC ends."""
        with self._cond:
            self._cond.wait_for(lambda: sent != self._version or not context.is_active())
            return (self._version, self._devices) if context.is_active() else None

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _allocate(
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        self.allocations.append(request)
        if not request.container_requests:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no container requests")
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(envs={"TOKENS": ",".join(container.devices_ids)})
                for container in request.container_requests
            ]
        )


def _prefer(
    request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
) -> pb.PreferredAllocationResponse:
    """The must-include IDs first, then the other available ones, up to the size."""
    responses = []
    for container in request.container_requests:
        ordered = list(container.must_include_deviceIDs) + [
            device_id
            for device_id in container.available_deviceIDs
            if device_id not in container.must_include_deviceIDs
        ]
        responses.append(
            pb.ContainerPreferredAllocationResponse(deviceIDs=ordered[: container.allocation_size])
        )
    return pb.PreferredAllocationResponse(container_responses=responses)


def register(
    kubelet_socket: Path,
    endpoint: str,
    resource: str = RESOURCE,
    version: str = VERSION,
    options: pb.DevicePluginOptions = PLUGIN_OPTIONS,
) -> None:
    """What a plugin does: call the kubelet's Register (raises grpc.RpcError if refused)."""
    with grpc.insecure_channel(f"unix:{kubelet_socket}") as channel:
        call = channel.unary_unary(REGISTER, _serialize, pb.Empty.FromString)
        call(
            pb.RegisterRequest(
                version=version, endpoint=endpoint, resource_name=resource, options=options
            ),
            timeout=TIMEOUT,
        )


def _serialize(message: pb.RegisterRequest) -> bytes:
    return message.SerializeToString()


def stale_socket(path: Path) -> None:
    """A socket file nobody listens on, as a crashed plugin leaves behind."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


def refusal(error: pytest.ExceptionInfo[grpc.RpcError]) -> str:
    assert error.value.code() == grpc.StatusCode.UNKNOWN
    return str(error.value.details())


@pytest.fixture
def standin(socket_dir: Path) -> Iterator[KubeletStandin]:
    """A stand-in on socket_dir itself, which the test also looks into."""
    with KubeletStandin(socket_dir, dial_timeout=5.0) as kubelet:
        yield kubelet


@pytest.fixture
def plugins(socket_dir: Path) -> Iterator[Callable[..., FakePlugin]]:
    """Start plugins serving in socket_dir; all are stopped afterwards."""
    started: list[FakePlugin] = []

    def start(endpoint: str, devices: Sequence[tuple[str, str]] = TWO_TOKENS) -> FakePlugin:
        started.append(FakePlugin(socket_dir / endpoint, devices))
        return started[-1]

    yield start
    for plugin in started:
        plugin.stop()


def test_register_dials_back_then_lists(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    plugins("token.sock")
    # Options unlike the plugin's answer, to tell them apart (a real plugin sends the same).
    register(
        standin.socket_path, "token.sock", options=pb.DevicePluginOptions(pre_start_required=True)
    )
    # Register answered only after the dial-back and GetDevicePluginOptions (kubelet 1.32).
    answered = standin.snapshot().resources[RESOURCE]
    assert (answered.registrations, answered.stream_open) == (1, True)
    assert answered.options == Options(False, True)
    assert answered.register_options == Options(True, False)

    view = standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    token = view.resources[RESOURCE]
    assert token.endpoint == "token.sock"
    assert (token.devices, token.lists_received, token.capacity) == (TWO_TOKENS, 1, 2)
    assert view.rejected == ()


def test_each_list_replaces_the_device_set(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    plugin = plugins("token.sock")
    register(standin.socket_path, "token.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    plugin.set_devices([("token-1", UNHEALTHY), ("token-7", HEALTHY), ("token-8", UNHEALTHY)])
    view = standin.wait_for(lambda v: v.resources[RESOURCE].lists_received == 2)
    token = view.resources[RESOURCE]
    assert (token.capacity, token.allocatable) == (3, 1)


@pytest.mark.parametrize("version", ["v1alpha", "", "v1beta2"])
def test_bad_version_is_refused(standin: KubeletStandin, version: str) -> None:
    with pytest.raises(grpc.RpcError) as error:
        register(standin.socket_path, "token.sock", version=version)
    text = f'requested API version "{version}" is not supported by kubelet.'
    assert refusal(error).startswith(text)
    view = standin.snapshot()
    assert view.rejected[0].startswith(text)
    assert dict(view.resources) == {}


BAD_NAMES = [
    "token",  # no domain: a native resource
    "kubernetes.io/token",
    "devices.kubernetes.io/token",
    "requests.example.com/token",  # a quota name
    "example.com/",
    "example.com/" + "t" * 64,
    "Example.com/token",  # the domain must be lower case
    "example.com/to/ken",
    "example.com/-token",
    "/token",
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_resource_name_is_refused(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin], name: str
) -> None:
    plugins("token.sock")
    with pytest.raises(grpc.RpcError) as error:
        register(standin.socket_path, "token.sock", resource=name)
    assert refusal(error) == f"the ResourceName {json.dumps(name)} is invalid"
    assert standin.snapshot().rejected == (refusal(error),)


@pytest.mark.parametrize(
    "name", ["example.com/token", "acme/token", "a.b-c.example/Token_1.x", "x/" + "t" * 63]
)
def test_extended_resource_names_are_accepted(name: str) -> None:
    assert is_extended_resource_name(name)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_other_names_are_not_extended_resources(name: str) -> None:
    assert not is_extended_resource_name(name)


def test_the_endpoint_is_joined_onto_the_directory_and_a_subdirectory_survives_restarts(
    socket_dir: Path, standin: KubeletStandin
) -> None:
    (socket_dir / "sub").mkdir()
    plugin = FakePlugin(socket_dir / "sub" / "token.sock", TWO_TOKENS)
    try:
        register(standin.socket_path, "sub/token.sock")
        assert standin.wait_for(lambda v: v.counts() == {RESOURCE: 2}).resources[
            RESOURCE
        ].endpoint == ("sub/token.sock")
        inode = plugin.path.stat().st_ino
        standin.restart()
        # The wipe skips directories: the same socket, still served, registered again as is.
        assert plugin.path.stat().st_ino == inode
        register(standin.socket_path, "sub/token.sock")
        view = standin.wait_for(lambda v: v.resources[RESOURCE].registrations == 2)
        assert view.counts() == {RESOURCE: 2}
    finally:
        plugin.stop()


@pytest.mark.parametrize("endpoint", ["../token.sock", "", "..", "missing/token.sock"])
def test_an_endpoint_with_no_socket_behind_it_fails_the_dial(
    standin: KubeletStandin, endpoint: str
) -> None:
    with pytest.raises(grpc.RpcError) as error:
        register(standin.socket_path, endpoint)
    assert refusal(error).startswith("failed to dial device plugin: no socket at ")
    assert dict(standin.snapshot().resources) == {}


def test_a_kubelet_that_refuses_subdirectory_endpoints(
    socket_dir: Path, plugins: Callable[..., FakePlugin]
) -> None:
    (socket_dir / "sub").mkdir()
    with KubeletStandin(socket_dir, subdirectory_endpoints=kubelet_module.REFUSED) as standin:
        # After the start, which wipes every socket beside kubelet.sock.
        plugins("sub/token.sock")
        plugins("token.sock")
        with pytest.raises(grpc.RpcError) as error:
            register(standin.socket_path, "sub/token.sock")
        assert refusal(error) == (
            'endpoint "sub/token.sock" is not the file name of a socket in the device-plugin '
            "directory"
        )
        register(standin.socket_path, "token.sock")
        assert standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})


def test_a_register_first_kubelet_that_never_dials_a_subdirectory(
    socket_dir: Path, plugins: Callable[..., FakePlugin]
) -> None:
    (socket_dir / "sub").mkdir()
    with KubeletStandin(
        socket_dir, register_first=True, subdirectory_endpoints=kubelet_module.NEVER_DIALLED
    ) as standin:
        plugins("sub/token.sock")
        plugins("token.sock")
        register(standin.socket_path, "sub/token.sock", resource="example.com/sub")
        register(standin.socket_path, "token.sock")
        view = standin.wait_for(lambda v: v.counts()[RESOURCE] == 2)
    # Answered, never connected: the kubelet counts nothing for it.
    sub = view.resources["example.com/sub"]
    assert (sub.registrations, sub.stream_open, sub.lists_received) == (1, False, 0)


def test_register_fails_when_the_dial_back_fails(socket_dir: Path) -> None:
    with KubeletStandin(socket_dir, dial_timeout=1.0) as standin:
        # After the start: a starting kubelet wipes every socket in the directory.
        stale_socket(socket_dir / "stale.sock")
        with pytest.raises(grpc.RpcError) as error:
            register(standin.socket_path, "stale.sock")
        assert refusal(error) == "failed to dial device plugin: context deadline exceeded"
        with pytest.raises(grpc.RpcError) as error:
            register(standin.socket_path, "missing.sock")
        assert refusal(error).startswith("failed to dial device plugin: no socket at ")
        view = standin.snapshot()
    assert len(view.rejected) == 2
    assert dict(view.resources) == {}


def test_register_first_answers_then_dials(
    socket_dir: Path, plugins: Callable[..., FakePlugin]
) -> None:
    # Long enough for the real plugin's dial on a busy machine; the stale one uses it all.
    with KubeletStandin(socket_dir, dial_timeout=3.0, register_first=True) as standin:
        stale_socket(socket_dir / "stale.sock")
        plugins("token.sock")
        register(standin.socket_path, "stale.sock", resource="example.com/stale")
        register(standin.socket_path, "token.sock")
        view = standin.wait_for(lambda v: len(v.rejected) == 1 and v.counts()[RESOURCE] == 2)
    assert view.rejected[0] == (
        "example.com/stale: failed to dial device plugin: context deadline exceeded"
        " (after Register was answered)"
    )
    stale = view.resources["example.com/stale"]
    assert (stale.registrations, stale.stream_open, stale.allocatable) == (1, False, 0)
    # A 1.24-era kubelet never asks GetDevicePluginOptions: the Register options count.
    token = view.resources[RESOURCE]
    assert (token.options, token.register_options) == (None, Options(False, True))


def test_restart_wipes_every_file_but_the_checkpoint_and_needs_reregistration(
    socket_dir: Path, standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    plugin = plugins("token.sock")
    register(standin.socket_path, "token.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    (socket_dir / "notes.txt").write_text("a regular file goes too")
    (socket_dir / "sub").mkdir()
    stale_socket(socket_dir / "sub" / "nested.sock")  # the kubelet does not recurse
    stale_socket(socket_dir / "stale.sock")

    standin.restart()

    assert sorted(p.name for p in socket_dir.iterdir()) == [
        "kubelet.sock",
        "kubelet_internal_checkpoint",
        "sub",
    ]
    assert standin.socket_path.is_socket()
    assert (socket_dir / "sub" / "nested.sock").is_socket()
    view = standin.snapshot()
    token = view.resources[RESOURCE]
    assert (view.generation, token.stream_open, token.allocatable) == (2, False, 0)
    assert (token.capacity, token.registrations) == (2, 1)
    plugin.wait_open_streams(0)

    # The plugin's server still runs but is unreachable; serving again brings it back.
    plugin.stop()
    plugins("token.sock")
    register(standin.socket_path, "token.sock")
    view = standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    assert view.resources[RESOURCE].registrations == 2


def test_reregistration_replaces_the_stream(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    first = plugins("first.sock")
    second = plugins("second.sock", [("token-9", HEALTHY)])
    register(standin.socket_path, "first.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    first.wait_open_streams(1)

    register(standin.socket_path, "second.sock")

    first.wait_open_streams(0)
    second.wait_open_streams(1)
    view = standin.wait_for(lambda v: v.resources[RESOURCE].lists_received == 1)
    token = view.resources[RESOURCE]
    assert (token.endpoint, token.registrations) == ("second.sock", 2)
    assert token.devices == (("token-9", HEALTHY),)
    assert view.counts() == {RESOURCE: 1}


def test_stream_end_makes_the_resource_unallocatable(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    plugin = plugins("token.sock")
    register(standin.socket_path, "token.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    plugin.stop()
    view = standin.wait_for(lambda v: not v.resources[RESOURCE].stream_open)
    token = view.resources[RESOURCE]
    assert (token.capacity, token.allocatable) == (2, 0)
    with pytest.raises(LookupError):
        standin.allocate(RESOURCE, ["token-0"])


def test_device_violations_are_recorded(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    long_id = "t" * 64
    devices = [(long_id, HEALTHY), ("token-1", "Sick"), ("token-2", HEALTHY), ("token-2", HEALTHY)]
    plugins("token.sock", devices)
    register(standin.socket_path, "token.sock")
    view = standin.wait_for(lambda v: v.resources[RESOURCE].lists_received == 1)
    assert view.rejected == (
        f'{RESOURCE}: device ID "{long_id}" is longer than 63 characters',
        f'{RESOURCE}: device "token-1" has health "Sick"',
        f'{RESOURCE}: device ID "token-2" appears more than once',
    )
    token = view.resources[RESOURCE]
    assert (token.capacity, token.allocatable) == (3, 2)


def test_a_list_over_4_mib_is_refused(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    devices = [(f"{i:063d}", HEALTHY) for i in range(70_000)]  # about 5 MB on the wire
    plugins("token.sock", devices)
    register(standin.socket_path, "token.sock")
    # Decoding 5 MB takes seconds under load: the wait is for the outcome, not a latency.
    view = standin.wait_for(lambda v: not v.resources[RESOURCE].stream_open, timeout=60)
    assert view.rejected[0].startswith(f"{RESOURCE}: rpc error: code = ResourceExhausted")
    assert view.resources[RESOURCE].lists_received == 0


def test_allocate_and_preferred_allocation_pass_through(
    standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    plugin = plugins("token.sock")
    register(standin.socket_path, "token.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})

    response = standin.allocate(RESOURCE, ["token-0", "token-1"])
    assert [dict(c.envs) for c in response.container_responses] == [{"TOKENS": "token-0,token-1"}]
    assert [list(c.devices_ids) for c in plugin.allocations[0].container_requests] == [
        ["token-0", "token-1"]
    ]
    with pytest.raises(grpc.RpcError) as error:
        standin.allocate_raw(RESOURCE, pb.AllocateRequest())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    preferred = standin.get_preferred_allocation(RESOURCE, ["token-0", "token-1"], ["token-1"], 1)
    assert [list(c.deviceIDs) for c in preferred.container_responses] == [["token-1"]]
    with pytest.raises(LookupError):
        standin.allocate("example.com/other", ["token-0"])


def test_wait_for_timeout_shows_what_the_kubelet_sees(standin: KubeletStandin) -> None:
    def never(view: KubeletView) -> bool:
        return False

    with pytest.raises(AssertionError, match=r"never still false after 0.2 s(.|\n)*generation"):
        standin.wait_for(never, timeout=0.2)


def test_stop_is_idempotent(socket_dir: Path) -> None:
    standin = KubeletStandin(socket_dir)
    standin.start()
    with pytest.raises(RuntimeError):
        standin.start()
    standin.stop()
    standin.stop()
    assert not standin.socket_path.exists()


def test_stop_is_bounded_when_a_cancelled_stream_does_not_end(
    socket_dir: Path, plugins: Callable[..., FakePlugin], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cancel that normally ends a client thread's stream is lost: stop() then closes the
    # stream's channel after LINK_END_SECONDS instead of waiting for ever.
    monkeypatch.setattr(kubelet_module, "LINK_END_SECONDS", 0.5)
    standin = KubeletStandin(socket_dir)
    standin.start()
    plugins("token.sock")
    register(standin.socket_path, "token.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    [link] = standin._ended
    lost_cancel = threading.Event()

    class LostCancel:
        """The stream as a cancel that never arrives leaves it: still open."""

        def __init__(self, call: Any) -> None:
            self._call = call

        def cancel(self) -> None:
            lost_cancel.set()

    link.call = LostCancel(link.call)  # type: ignore[assignment]
    started = time.monotonic()
    standin.stop()
    assert lost_cancel.is_set()
    assert link.thread is not None
    assert not link.thread.is_alive()
    assert time.monotonic() - started < 5.0


class _Lines:
    """A subprocess's output lines, waited for with a deadline instead of sleeps."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)  # end of output

    def expect(self, text: str) -> str:
        while True:
            try:
                line = self._queue.get(timeout=TIMEOUT)
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(f"no line with {text!r}; output so far: {self.seen}")
            self.seen.append(line)
            if text in line:
                return line

    def close(self) -> None:
        self._reader.join(TIMEOUT)


@pytest.fixture
def run_script(socket_dir: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[str], _Lines]]]:
    """Run the stand-in as a process (as the system tests' containers do); killed afterwards."""
    running: list[tuple[subprocess.Popen[str], _Lines]] = []

    def run(*args: str) -> tuple[subprocess.Popen[str], _Lines]:
        command = [sys.executable, "-m", SCRIPT, "--dir", str(socket_dir), *args]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
        )
        assert process.stdout is not None
        running.append((process, _Lines(process.stdout)))
        return running[-1]

    yield run
    for process, lines in running:
        if process.poll() is None:
            process.kill()
        process.wait(TIMEOUT)
        lines.close()
        assert process.stdout is not None
        process.stdout.close()


def test_script_mode_state_file_and_signals(
    socket_dir: Path,
    plugins: Callable[..., FakePlugin],
    run_script: Callable[..., tuple[subprocess.Popen[str], _Lines]],
) -> None:
    state_file = socket_dir / "state" / "kubelet.json"
    state_file.parent.mkdir()
    process, lines = run_script("--state-file", str(state_file))

    def state() -> dict[str, Any]:
        data: dict[str, Any] = json.loads(state_file.read_text())
        return data

    lines.expect("(generation 1)")
    assert state()["generation"] == 1
    plugin = plugins("token.sock")
    register(socket_dir / "kubelet.sock", "token.sock")
    lines.expect("registered example.com/token via token.sock")
    lines.expect("example.com/token: 2 devices [token-0 Healthy, token-1 Healthy]")
    assert state()["resources"][RESOURCE]["allocatable"] == 2

    process.send_signal(signal.SIGHUP)
    lines.expect("(generation 2)")
    assert (socket_dir / "kubelet.sock").is_socket()
    assert not plugin.path.exists()
    assert state()["generation"] == 2
    assert state()["resources"][RESOURCE]["allocatable"] == 0

    process.send_signal(signal.SIGTERM)
    assert process.wait(TIMEOUT) == 0
    assert not (socket_dir / "kubelet.sock").exists()


def test_script_mode_exits_0_on_sigint(
    socket_dir: Path, run_script: Callable[..., tuple[subprocess.Popen[str], _Lines]]
) -> None:
    process, lines = run_script("--register-first")
    lines.expect("(generation 1)")
    process.send_signal(signal.SIGINT)
    assert process.wait(TIMEOUT) == 0
    lines.expect("kubelet stopped")


def test_a_starting_kubelet_wipes_every_file_but_its_checkpoint(socket_dir: Path) -> None:
    """As 1.24 to 1.32 do: sockets, regular files (a lock file, say) and symlinks, even to a
    directory, go; the checkpoint and subdirectories stay, and nothing inside is touched."""
    stale_socket(socket_dir / "plugin.sock")
    (socket_dir / "token-resource.lock").write_text("1234\n")
    (socket_dir / "link").symlink_to(socket_dir / "token-resource.lock")
    (socket_dir / "dangling").symlink_to(socket_dir / "nowhere")
    (socket_dir / "sub").mkdir()
    (socket_dir / "sub" / "file").write_text("inside a subdirectory: kept")
    (socket_dir / "sub-link").symlink_to(socket_dir / "sub")
    (socket_dir / "kubelet_internal_checkpoint").write_text('{"old": "checkpoint"}')
    with KubeletStandin(socket_dir) as standin:
        assert sorted(path.name for path in socket_dir.iterdir()) == [
            "kubelet.sock",
            "kubelet_internal_checkpoint",
            "sub",
        ]
        assert (socket_dir / "sub" / "file").exists()
        assert standin.snapshot().generation == 1
        # The starting kubelet writes its own checkpoint over the old one.
        assert json.loads(standin.checkpoint_path.read_text())["generation"] == 1


def test_restarts_keep_only_the_checkpoint_and_rewrite_it(
    socket_dir: Path, standin: KubeletStandin, plugins: Callable[..., FakePlugin]
) -> None:
    plugins("token.sock")
    register(standin.socket_path, "token.sock")
    standin.wait_for(lambda v: v.counts() == {RESOURCE: 2})
    for generation in range(2, 5):
        (socket_dir / "marker").write_text("gone at every kubelet start")
        standin.restart()
        assert sorted(p.name for p in socket_dir.iterdir()) == [
            "kubelet.sock",
            "kubelet_internal_checkpoint",
        ]
        checkpoint = json.loads(standin.checkpoint_path.read_text())
        assert checkpoint == {
            "generation": generation,
            "registered_devices": {RESOURCE: ["token-0", "token-1"]},
            "pod_devices": {},
        }
    standin.stop()
    # A stopping kubelet removes its socket; the checkpoint stays for the next start.
    assert sorted(p.name for p in socket_dir.iterdir()) == ["kubelet_internal_checkpoint"]
