"""The kubelet stand-in's DRA side follows the real kubelet's plugin watcher and DRA manager,
proved against a small fake plugin (Registration and DRAPlugin over real unix sockets) and the
API-server stand-in over real HTTPS."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from tests.paths import short_temporary_directory
from tests.standin.apiserver import ApiServerStandin, CertificateAuthority
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.kubelet_dra import ApiAccess, DriverView
from tests.standin.kubelet_plugins import RECONCILE_SECONDS
from token_resource.protocol import dra_health_v1alpha1_pb2 as health_pb
from token_resource.protocol import dra_v1_pb2 as dra_pb
from token_resource.protocol import pluginregistration_pb2 as reg_pb
from token_resource.protocol.dra import HEALTH_SERVICES, SERVICES, SUPPORTED_VERSIONS, health_method
from token_resource.protocol.pluginregistration import DRA_PLUGIN_TYPE, REGISTRATION_SERVICE

NODE = "node-a"
DRIVER = "tokens.example.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
TIMEOUT = 30.0


class FakeDraPlugin:
    """A DRA driver's kubelet plugin: Registration on ``<registry>/<name>``, DRAPlugin on
    ``dra.sock`` in its own directory; answers prepares with one device per claim."""

    def __init__(
        self,
        registry: Path,
        directory: Path,
        *,
        name: str = "reg.sock",
        driver: str = DRIVER,
        versions: Sequence[str] = ("v1.DRAPlugin", "v1beta1.DRAPlugin"),
        plugin_type: str = DRA_PLUGIN_TYPE,
        skip_claims: bool = False,
    ) -> None:
        self.endpoint = directory / "dra.sock"
        self.socket = registry / name
        self.driver, self.versions, self.plugin_type = driver, tuple(versions), plugin_type
        self.skip_claims = skip_claims
        self.statuses: list[tuple[bool, str]] = []
        self.prepared: list[tuple[str, list[str]]] = []  # (method path, claim UIDs)
        self._cond = threading.Condition()
        self._executor = ThreadPoolExecutor(4)
        self._dra = grpc.server(self._executor, handlers=self._dra_handlers())
        self._dra.add_insecure_port(f"unix:{self.endpoint}")
        self._dra.start()
        self._registration = grpc.server(self._executor, handlers=[self._handler()])
        self._registration.add_insecure_port(f"unix:{self.socket}")
        self._registration.start()

    def stop(self, *, remove_socket: bool = True) -> None:
        self._registration.stop(None).wait()
        self._dra.stop(None).wait()
        if remove_socket:
            self.socket.unlink(missing_ok=True)
        self._executor.shutdown(wait=True)

    def wait_status(self, count: int = 1) -> tuple[bool, str]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.statuses) >= count, TIMEOUT), self.statuses
            return self.statuses[count - 1]

    def _handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        return grpc.method_handlers_generic_handler(
            REGISTRATION_SERVICE,
            {
                "GetInfo": grpc.unary_unary_rpc_method_handler(
                    self._get_info,
                    request_deserializer=reg_pb.InfoRequest.FromString,
                    response_serializer=reg_pb.PluginInfo.SerializeToString,
                ),
                "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                    self._notify,
                    request_deserializer=reg_pb.RegistrationStatus.FromString,
                    response_serializer=reg_pb.RegistrationStatusResponse.SerializeToString,
                ),
            },
        )

    def _get_info(self, request: reg_pb.InfoRequest, context: grpc.ServicerContext) -> Any:
        return reg_pb.PluginInfo(
            type=self.plugin_type,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=self.versions,
        )

    def _notify(self, request: reg_pb.RegistrationStatus, context: grpc.ServicerContext) -> Any:
        with self._cond:
            self.statuses.append((request.plugin_registered, request.error))
            self._cond.notify_all()
        return reg_pb.RegistrationStatusResponse()

    def _dra_handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        """Both versions' DRAPlugin, each call recorded with its full method path."""
        handlers = []
        for service in SERVICES.values():
            methods = {}
            for name, call, request_type, response_type in (
                (
                    "NodePrepareResources",
                    self._prepare,
                    dra_pb.NodePrepareResourcesRequest,
                    dra_pb.NodePrepareResourcesResponse,
                ),
                (
                    "NodeUnprepareResources",
                    self._unprepare,
                    dra_pb.NodeUnprepareResourcesRequest,
                    dra_pb.NodeUnprepareResourcesResponse,
                ),
            ):
                path = f"/{service}/{name}"
                methods[name] = grpc.unary_unary_rpc_method_handler(
                    lambda request, context, call=call, path=path: call(path, request),
                    request_deserializer=request_type.FromString,
                    response_serializer=response_type.SerializeToString,
                )
            handlers.append(grpc.method_handlers_generic_handler(service, methods))
        return handlers

    def _prepare(self, path: str, request: Any) -> Any:
        self.prepared.append((path, [claim.uid for claim in request.claims]))
        claims = list(request.claims)[: -1 if self.skip_claims else None]
        return dra_pb.NodePrepareResourcesResponse(
            claims={
                claim.uid: dra_pb.NodePrepareResourceResponse(
                    devices=[
                        dra_pb.Device(
                            request_names=["tokens"],
                            pool_name=NODE,
                            device_name="token-0",
                            cdi_device_ids=[f"example.com/token={claim.uid}"],
                        )
                    ]
                )
                for claim in claims
            }
        )

    def _unprepare(self, path: str, request: Any) -> Any:
        self.prepared.append((path, [claim.uid for claim in request.claims]))
        return dra_pb.NodeUnprepareResourcesResponse(
            claims={c.uid: dra_pb.NodeUnprepareResourceResponse() for c in request.claims}
        )


@pytest.fixture
def dirs() -> Iterator[tuple[Path, Path, Path]]:
    """The device-plugin directory, plugins_registry, and a plugin's own directory."""
    with short_temporary_directory("tr-k-") as root:
        paths = (root / "dp", root / "reg", root / "plugin")
        for path in paths:
            path.mkdir()
        yield paths


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE,)) as standin:
        yield standin


def access(apiserver: ApiServerStandin, node: str = NODE) -> ApiAccess:
    """The kubelet's own credentials for ``node``."""
    pair = apiserver.ca.node_certificate(node)
    return ApiAccess(apiserver.url, apiserver.ca.cert_pem, pair.cert_pem, pair.key_pem)


@pytest.fixture
def kubelet(dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin) -> Iterator[KubeletStandin]:
    with KubeletStandin(
        dirs[0],
        plugins_registry_dir=dirs[1],
        node=NODE,
        apiserver=access(apiserver),
        deregistration_grace=1.0,
    ) as standin:
        yield standin


def registered(driver: str = DRIVER, count: int = 1) -> Any:
    def holds(view: KubeletView) -> bool:
        assert view.dra is not None
        plugins = view.dra.drivers[driver].plugins
        return len(plugins) == count and all(p.connected for p in plugins)

    holds.__qualname__ = f"{count} connected plugin(s) of {driver}"
    return holds


def a_slice(name: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": "token-0"}],
        },
    }


def put_slice(apiserver: ApiServerStandin, name: str, driver: str = DRIVER) -> None:
    """A slice as the agent would publish it (the admin path: the test is not the node)."""
    with apiserver._cond:
        obj = apiserver._new_object("resourceslices", a_slice(name, driver), "")
        apiserver._put("resourceslices", name, obj, "ADDED")


def test_registration_is_accepted_with_v1_and_calls_reach_the_plugin(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    plugin = FakeDraPlugin(dirs[1], dirs[2])
    try:
        assert plugin.wait_status() == (True, "")
        view = kubelet.wait_for(registered())
        assert view.dra is not None
        (shown,) = view.dra.drivers[DRIVER].plugins
        assert (shown.endpoint, shown.version) == (str(plugin.endpoint), "v1.DRAPlugin")
        result = kubelet.prepare(DRIVER, [("default", "uid-1", "tokens")])
        assert result.error is None
        assert result.claims["uid-1"].devices == (
            (("tokens",), NODE, "token-0", ("example.com/token=uid-1",)),
        )
        assert kubelet.unprepare(DRIVER, [("default", "uid-1", "tokens")]).error is None
        assert plugin.prepared == [
            ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", ["uid-1"]),
            ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", ["uid-1"]),
        ]
        view = kubelet.snapshot()
        assert view.dra is not None
        assert len(view.dra.drivers[DRIVER].prepares) == 1
        assert view.rejected == ()
    finally:
        plugin.stop()


def v1beta1_kubelet(dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin) -> KubeletStandin:
    """A kubelet of the 1.32 era: v1beta1 only, one plugin per driver."""
    return KubeletStandin(
        dirs[0],
        plugins_registry_dir=dirs[1],
        apiserver=access(apiserver),
        dra_versions=("v1beta1.DRAPlugin",),
    )


def test_a_v1beta1_kubelet_uses_v1beta1(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    with v1beta1_kubelet(dirs, apiserver) as kubelet:
        plugin = FakeDraPlugin(dirs[1], dirs[2])
        try:
            kubelet.wait_for(registered())
            assert kubelet.prepare(DRIVER, [("default", "u", "c")]).error is None
            assert plugin.prepared[0][0].startswith("/k8s.io.kubelet.pkg.apis.dra.v1beta1.")
        finally:
            plugin.stop()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            {"versions": ("v9.DRAPlugin",)},
            "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC "
            f"versions of DRA driver plugin {DRIVER} at endpoint {{endpoint}}: none of services "
            'supported by the plugin (["v9.DRAPlugin"]) are supported by the kubelet '
            '(["v1.DRAPlugin" "v1beta1.DRAPlugin"])',
        ),
        (
            {"versions": ()},
            "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC "
            f"versions of DRA driver plugin {DRIVER} at endpoint {{endpoint}}: empty list of "
            "supported gRPC services (aka supported versions)",
        ),
        (
            {"plugin_type": "CSIPlugin"},
            "RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket "
            "{socket}",
        ),
    ],
)
def test_a_refused_registration_is_told_why_and_tried_again(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin, options: dict[str, Any], error: str
) -> None:
    plugin = FakeDraPlugin(dirs[1], dirs[2], **options)
    try:
        expected = error.format(endpoint=plugin.endpoint, socket=plugin.socket)
        assert plugin.wait_status() == (False, expected)
        assert plugin.wait_status(2) == (False, expected)  # the backoff's retry (0.5 s)
        view = kubelet.snapshot()
        assert view.dra is not None
        assert DRIVER not in view.dra.drivers or not view.dra.drivers[DRIVER].plugins
    finally:
        plugin.stop()


def test_deregistration_wipes_the_drivers_slices_after_the_grace(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin, apiserver: ApiServerStandin
) -> None:
    kubelet.wait_for(lambda view: view.dra is not None and view.dra.start_wipes == 1)
    plugin = FakeDraPlugin(dirs[1], dirs[2])
    kubelet.wait_for(registered())
    put_slice(apiserver, "mine")
    put_slice(apiserver, "other-driver", driver="other.example.com")
    plugin.stop()  # removes its registration socket
    view = kubelet.wait_for(lambda v: v.dra is not None and v.dra.drivers[DRIVER].wipes == 1)
    assert view.dra is not None
    assert view.dra.drivers[DRIVER].deregistrations == 1
    assert sorted(apiserver.snapshot().slices) == ["other-driver"]
    wipe = [r for r in apiserver.requests if r.method == "DELETE"][-1]
    assert wipe.query == "fieldSelector=spec.driver%3Dtokens.example.com%2Cspec.nodeName%3Dnode-a"
    assert wipe.identity == f"system:node:{NODE}"


def test_a_plugin_back_within_the_grace_keeps_its_slices(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    with KubeletStandin(
        dirs[0],
        plugins_registry_dir=dirs[1],
        apiserver=access(apiserver),
        deregistration_grace=TIMEOUT,
    ) as kubelet:
        kubelet.wait_for(lambda view: view.dra is not None and view.dra.start_wipes == 1)
        first = FakeDraPlugin(dirs[1], dirs[2])
        kubelet.wait_for(registered())
        put_slice(apiserver, "mine")
        first.stop()
        second = FakeDraPlugin(dirs[1], dirs[2])
        try:
            # The second plugin's own registration: until the stand-in has seen the first one
            # go, its view may still show that one connected.
            connected = registered()
            kubelet.wait_for(
                lambda view: (
                    connected(view)
                    and view.dra is not None
                    and view.dra.drivers[DRIVER].registrations == 2
                )
            )
        finally:
            second.stop()
        assert sorted(apiserver.snapshot().slices) == ["mine"]


def test_the_kubelet_wipes_its_nodes_slices_at_start(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    put_slice(apiserver, "left-over")
    with KubeletStandin(
        dirs[0], plugins_registry_dir=dirs[1], apiserver=access(apiserver)
    ) as kubelet:
        kubelet.wait_for(lambda view: view.dra is not None and view.dra.start_wipes == 1)
        assert apiserver.snapshot().slices == {}
        wipe = [r for r in apiserver.requests if r.method == "DELETE"][-1]
        assert (wipe.path, wipe.query) == (SLICES, "fieldSelector=spec.nodeName%3Dnode-a")


def test_two_plugins_of_one_driver_calls_go_to_the_newest(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    old = FakeDraPlugin(dirs[1], dirs[2], name="old.sock")
    kubelet.wait_for(registered())
    with short_temporary_directory("tr-p2-") as other:
        new = FakeDraPlugin(dirs[1], other, name="new.sock")
        try:
            kubelet.wait_for(registered(count=2))
            kubelet.prepare(DRIVER, [("default", "u", "c")])
            assert (len(old.prepared), len(new.prepared)) == (0, 1)
            new.stop()
            view = kubelet.wait_for(registered(count=1))
            assert driver_of(view).unregistered == 0
            kubelet.prepare(DRIVER, [("default", "u", "c")])
            assert len(old.prepared) == 1
        finally:
            new.stop()
            old.stop()


def test_a_plugin_made_again_at_its_path_is_gone_until_the_reconcilers_next_pass(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    """A killed plugin's successor binds the same socket path (gRPC replaces the file): the
    old registration goes at once, the new one comes a pass (a second) later, and the driver
    has no plugin in between, as on a real 1.36 and 1.37 kubelet."""
    first = FakeDraPlugin(dirs[1], dirs[2])
    kubelet.wait_for(registered())
    first.stop(remove_socket=False)
    made = time.monotonic()
    second = FakeDraPlugin(dirs[1], dirs[2])
    try:
        assert second.wait_status() == (True, "")
        assert time.monotonic() - made >= RECONCILE_SECONDS
        view = kubelet.wait_for(registered())
        assert (driver_of(view).deregistrations, driver_of(view).unregistered) == (1, 1)
    finally:
        second.stop()


def test_a_132_kubelet_keeps_one_plugin_per_driver_and_drops_it_when_either_leaves(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    with v1beta1_kubelet(dirs, apiserver) as kubelet:
        old = FakeDraPlugin(dirs[1], dirs[2], name="old.sock")
        kubelet.wait_for(registered())
        with short_temporary_directory("tr-p4-") as other:
            new = FakeDraPlugin(dirs[1], other, name="new.sock")
            try:
                # The new one replaced the old one, which the kubelet forgets.
                kubelet.wait_for(
                    lambda view: (
                        [p.endpoint for p in driver_of(view).plugins] == [str(new.endpoint)]
                    )
                )
                assert kubelet.prepare(DRIVER, [("default", "u", "c")]).error is None
                assert (len(old.prepared), len(new.prepared)) == (0, 1)
                # The old one leaves, and the driver with it: the new one is not used.
                old.stop()
                view = kubelet.wait_for(lambda view: driver_of(view).unregistered == 1)
                assert driver_of(view).plugins == ()
                result = kubelet.prepare(DRIVER, [("default", "u", "c")])
                assert result.error == f"DRA driver {DRIVER} is not registered"
            finally:
                new.stop()
                old.stop()


def test_a_second_plugin_on_a_taken_endpoint_is_refused(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    first = FakeDraPlugin(dirs[1], dirs[2], name="a.sock")
    kubelet.wait_for(registered())
    # Another registration socket naming the same endpoint: gRPC lets both bind only if the
    # second server is another process, so its DRA socket goes elsewhere and the info lies.
    with short_temporary_directory("tr-p3-") as other:
        second = FakeDraPlugin(dirs[1], other, name="b.sock")
        second.endpoint = first.endpoint
        try:
            assert second.wait_status() == (
                False,
                "RegisterPlugin error -- plugin registration failed with err: endpoint "
                f"{first.endpoint} already registered for DRA driver plugin {DRIVER}",
            )
        finally:
            second.stop()
            first.stop()


def test_a_claim_left_out_of_the_answer_is_a_protocol_violation(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    plugin = FakeDraPlugin(dirs[1], dirs[2], skip_claims=True)
    try:
        kubelet.wait_for(registered())
        result = kubelet.prepare(DRIVER, [("default", "u1", "a"), ("default", "u2", "b")])
        assert result.error == "NodePrepareResources skipped 1 ResourceClaims"
        assert list(result.claims) == ["u1"]
        assert kubelet.snapshot().rejected == (
            f"{DRIVER}: NodePrepareResources left out claims ['u2']",
        )
    finally:
        plugin.stop()


def test_an_unregistered_driver_is_the_kubelets_error(kubelet: KubeletStandin) -> None:
    result = kubelet.prepare("gone.example.com", [("default", "u", "c")])
    assert result.error == "DRA driver gone.example.com is not registered"


def test_dot_files_and_non_sockets_are_ignored(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    (dirs[1] / "not-a-socket").write_text("")
    hidden = FakeDraPlugin(dirs[1], dirs[2], name=".hidden.sock")
    try:
        with short_temporary_directory("tr-p4-") as other:
            visible = FakeDraPlugin(dirs[1], other, name="visible.sock", driver="b.example.com")
            try:
                kubelet.wait_for(registered("b.example.com"))
                view = kubelet.snapshot()
                assert view.dra is not None
                assert DRIVER not in view.dra.drivers
                assert hidden.statuses == []
            finally:
                visible.stop()
    finally:
        hidden.stop()


def test_a_136_kubelet_takes_the_first_version_the_plugin_lists(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    """dra_plugin_manager.go validateSupportedServices walks the plugin's list, not its own."""
    plugin = FakeDraPlugin(dirs[1], dirs[2], versions=("v1beta1.DRAPlugin", "v1.DRAPlugin"))
    try:
        view = kubelet.wait_for(registered())
        assert view.dra is not None
        assert view.dra.drivers[DRIVER].plugins[0].version == "v1beta1.DRAPlugin"
    finally:
        plugin.stop()


# --- health (ResourceHealthStatus): NodeWatchResources on every plugin's DRA socket -----------

V1ALPHA1_WATCH = "/v1alpha1.DRAResourceHealth/NodeWatchResources"
V1_WATCH = "/v1.DRAResourceHealth/NodeWatchResources"
UNIMPLEMENTED = "rpc error: code = Unimplemented desc = Method not found!"


class WatchedDraPlugin(FakeDraPlugin):
    """A FakeDraPlugin that notes every call reaching its DRA socket, served or not (a generic
    handler, asked first, that serves none), and with ``health`` serves both versions of the
    health service: each stream sends every response of ``send_health`` so far, then each new
    one, until the kubelet ends it; or, with ``health_failure``, fails at once with that code."""

    def __init__(
        self,
        registry: Path,
        directory: Path,
        *,
        health: bool = False,
        health_failure: grpc.StatusCode | None = None,
        **options: Any,
    ):
        self.health = health or health_failure is not None
        self.health_failure = health_failure
        self.calls: list[tuple[float, str]] = []  # (time.monotonic(), method path)
        self.health_sent: list[health_pb.NodeWatchResourcesResponse] = []
        self.health_opened: list[str] = []  # the method path of each stream
        self.health_ended = 0
        super().__init__(registry, directory, **options)

    def send_health(self, *devices: health_pb.DeviceHealth) -> None:
        with self._cond:
            self.health_sent.append(health_pb.NodeWatchResourcesResponse(devices=devices))
            self._cond.notify_all()

    def watch_calls(self) -> list[tuple[float, str]]:
        with self._cond:
            return [(at, path) for at, path in self.calls if path.endswith("/NodeWatchResources")]

    def wait_health_ended(self, count: int = 1) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.health_ended >= count, TIMEOUT)

    def _dra_handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        handlers: list[grpc.GenericRpcHandler[Any, Any]] = [_Noting(self)]
        for service in HEALTH_SERVICES if self.health else ():
            path = health_method(service)
            watch = grpc.unary_stream_rpc_method_handler(
                lambda request, context, path=path: self._watch(path, context),
                request_deserializer=health_pb.NodeWatchResourcesRequest.FromString,
                response_serializer=health_pb.NodeWatchResourcesResponse.SerializeToString,
            )
            handlers.append(
                grpc.method_handlers_generic_handler(service, {"NodeWatchResources": watch})
            )
        return handlers + super()._dra_handlers()

    def _watch(self, path: str, context: grpc.ServicerContext) -> Iterator[Any]:
        # The end of the RPC, however it comes (the generator may never be resumed).
        context.add_callback(self._stream_ended)
        with self._cond:
            self.health_opened.append(path)
            self._cond.notify_all()
        if self.health_failure is not None:
            context.abort(self.health_failure, "no health today")
        sent = 0
        while True:
            with self._cond:
                while len(self.health_sent) <= sent and context.is_active():
                    self._cond.wait()
                if not context.is_active():
                    return
                pending = self.health_sent[sent:]
            yield from pending
            sent += len(pending)

    def _stream_ended(self) -> None:
        with self._cond:
            self.health_ended += 1
            self._cond.notify_all()


class _Noting(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    def __init__(self, plugin: WatchedDraPlugin) -> None:
        self._plugin = plugin

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> None:
        """Serves none: the next handler's, or "Method not found!"."""
        with self._plugin._cond:
            self._plugin.calls.append((time.monotonic(), handler_call_details.method))


def device(
    name: str,
    health: health_pb.HealthStatus,
    *,
    message: str = "",
    timeout: int = 0,
    updated: int | None = None,
) -> health_pb.DeviceHealth:
    return health_pb.DeviceHealth(
        device=health_pb.DeviceIdentifier(pool_name=NODE, device_name=name),
        health=health,
        last_updated_time=int(time.time()) if updated is None else updated,
        health_check_timeout_seconds=timeout,
        message=message,
    )


def driver_of(view: KubeletView, driver: str = DRIVER) -> DriverView:
    assert view.dra is not None
    return view.dra.drivers[driver]


def health_responses(count: int) -> Callable[[KubeletView], bool]:
    def holds(view: KubeletView) -> bool:
        return driver_of(view).health_responses >= count

    holds.__qualname__ = f"{count} health response(s) from {DRIVER}"
    return holds


def health_errors(count: int) -> Callable[[KubeletView], bool]:
    def holds(view: KubeletView) -> bool:
        return len(driver_of(view).health_errors) >= count

    holds.__qualname__ = f"{count} health stream error(s) of {DRIVER}"
    return holds


def test_a_136_kubelet_keeps_watching_the_health_of_a_plugin_that_does_not_serve_it(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    """As on a real 1.36.2 node: every attempt fails with Unimplemented, and the next follows
    the retry interval after the failure; the driver stays usable."""
    retry = 0.2
    with KubeletStandin(
        dirs[0], plugins_registry_dir=dirs[1], apiserver=access(apiserver), dra_health_retry=retry
    ) as kubelet:
        plugin = WatchedDraPlugin(dirs[1], dirs[2], versions=("v1.DRAPlugin",))
        try:
            view = kubelet.wait_for(health_errors(3))
            driver = driver_of(view)
            assert driver.health_errors[:3] == (UNIMPLEMENTED,) * 3
            assert driver.plugins[0].health_service == "v1alpha1.DRAResourceHealth"
            assert (driver.health_responses, driver.health) == (0, ())
            calls = plugin.watch_calls()
            assert [path for _, path in calls[:3]] == [V1ALPHA1_WATCH] * 3
            gaps = [later - earlier for (earlier, _), (later, _) in zip(calls, calls[1:])]
            assert all(retry <= gap < retry + 2.0 for gap in gaps), gaps
            assert driver.health_streams >= len(driver.health_errors)
            assert kubelet.prepare(DRIVER, [("default", "u", "c")]).error is None
            assert kubelet.snapshot().rejected == ()
        finally:
            plugin.stop()


def test_a_137_kubelet_stops_watching_a_plugin_that_answers_unimplemented(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    """dra_plugin_manager.go ``add``: an Unimplemented end of the stream (logged at V(4), no
    error) cancels the loop, until the plugin registers again; another error is retried. The
    other driver's retries are the clock: several intervals pass without a second call."""
    retry = 0.2
    with (
        KubeletStandin(
            dirs[0],
            plugins_registry_dir=dirs[1],
            apiserver=access(apiserver),
            dra_resource_health="1.37",
            dra_health_retry=retry,
        ) as kubelet,
        short_temporary_directory("tr-p5-") as other,
    ):
        lists_health = ("v1.DRAPlugin", "v1.DRAResourceHealth")
        plugin = WatchedDraPlugin(dirs[1], dirs[2], versions=lists_health)
        failing = WatchedDraPlugin(
            dirs[1],
            other,
            name="b.sock",
            driver="b.example.com",
            versions=lists_health,
            health_failure=grpc.StatusCode.UNAVAILABLE,
        )
        try:
            view = kubelet.wait_for(lambda v: driver_of(v).plugins[0].health_stopped)
            view = kubelet.wait_for(lambda v: len(driver_of(v, "b.example.com").health_errors) >= 4)
            driver, retried = driver_of(view), driver_of(view, "b.example.com")
            assert (driver.health_streams, driver.health_errors) == (1, ())
            assert [path for _, path in plugin.watch_calls()] == [V1_WATCH]
            assert retried.health_errors[0] == (
                "rpc error: code = Unavailable desc = no health today"
            )
            assert not retried.plugins[0].health_stopped
            assert kubelet.prepare(DRIVER, [("default", "u", "c")]).error is None

            plugin.stop()  # registering again: a new plugin, watched once more
            kubelet.wait_for(lambda v: not driver_of(v).plugins)
            plugin = WatchedDraPlugin(dirs[1], dirs[2], versions=lists_health)
            view = kubelet.wait_for(
                lambda v: [p.health_stopped for p in driver_of(v).plugins] == [True]
            )
            assert driver_of(view).health_streams == 2
            assert [path for _, path in plugin.watch_calls()] == [V1_WATCH]
        finally:
            plugin.stop()
            failing.stop()


def test_the_health_a_plugin_reports_is_kept_per_device_and_updated_by_each_response(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    """A 1.36 kubelet opens v1alpha1 even on a plugin that lists v1 (the agent's list). The
    kubelet times a device from its own receipt: an hour-old last_updated_time is no matter."""
    plugin = WatchedDraPlugin(dirs[1], dirs[2], versions=SUPPORTED_VERSIONS, health=True)
    try:
        an_hour_ago = int(time.time()) - 3600
        plugin.send_health(
            device("token-0", health_pb.HEALTHY, updated=an_hour_ago),
            device("token-1", health_pb.UNHEALTHY, message="too hot"),
            device("token-2", health_pb.HEALTHY),
        )
        driver = driver_of(kubelet.wait_for(health_responses(1)))
        assert [(d.pool, d.device, d.health, d.effective, d.message) for d in driver.health] == [
            (NODE, "token-0", "Healthy", "Healthy", ""),
            (NODE, "token-1", "Unhealthy", "Unhealthy", "too hot"),
            (NODE, "token-2", "Healthy", "Healthy", ""),
        ]
        assert driver.device_health(NODE, "token-0").last_updated_time == an_hour_ago
        assert {d.timeout for d in driver.health} == {30.0}
        assert (driver.health_streams, driver.health_errors) == (1, ())
        first = driver.device_health(NODE, "token-2")

        plugin.send_health(
            device("token-0", health_pb.UNHEALTHY, message="gone"),
            device("token-1", health_pb.HEALTHY),
            device("token-3", cast(health_pb.HealthStatus, 7)),  # one it does not know: Unknown
        )
        driver = driver_of(kubelet.wait_for(health_responses(2)))
        assert [(d.device, d.health, d.message) for d in driver.health] == [
            ("token-0", "Unhealthy", "gone"),
            ("token-1", "Healthy", ""),
            ("token-2", "Healthy", ""),  # not in the update: kept until its timeout
            ("token-3", "Unknown", ""),
        ]
        assert driver.device_health(NODE, "token-2") == first
        assert (driver.health_streams, driver.health_errors) == (1, ())
        assert plugin.health_opened == [V1ALPHA1_WATCH]
    finally:
        plugin.stop()


def test_a_device_not_updated_within_its_timeout_reads_unknown(
    dirs: tuple[Path, Path, Path], kubelet: KubeletStandin
) -> None:
    plugin = WatchedDraPlugin(dirs[1], dirs[2], health=True)
    try:
        plugin.send_health(
            device("token-0", health_pb.UNHEALTHY, message="too hot", timeout=2),
            device("token-1", health_pb.HEALTHY),  # 0: the kubelet's 30 s
            device("token-2", health_pb.HEALTHY, timeout=-5),  # likewise
        )
        driver = driver_of(kubelet.wait_for(health_responses(1)))
        assert driver.device_health(NODE, "token-0").effective == "Unhealthy"
        assert [d.timeout for d in driver.health] == [2.0, 30.0, 30.0]

        def timed_out(view: KubeletView) -> bool:
            return driver_of(view).device_health(NODE, "token-0").effective == "Unknown"

        driver = driver_of(kubelet.wait_for(timed_out))
        token_0 = driver.device_health(NODE, "token-0")
        assert time.monotonic() - token_0.received > 2.0
        assert (token_0.health, token_0.message) == ("Unhealthy", "too hot")  # as reported
        assert driver.device_health(NODE, "token-1").effective == "Healthy"
        assert driver.device_health(NODE, "token-2").effective == "Healthy"
        # Only time passed: the stream is still the first one, open, without an error.
        assert (driver.health_streams, driver.health_responses, driver.health_errors) == (1, 1, ())
        assert plugin.health_ended == 0
    finally:
        plugin.stop()


@pytest.mark.parametrize(
    ("versions", "watched"),
    [
        (("v1.DRAPlugin", "v1.DRAResourceHealth"), V1_WATCH),
        (("v1.DRAPlugin", "v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"), V1_WATCH),
        # pickHealthService: a driver of before v1 is still read, for three releases.
        (("v1.DRAPlugin", "v1alpha1.DRAResourceHealth"), V1ALPHA1_WATCH),
        (("v1.DRAPlugin", "v1beta1.DRAPlugin"), None),
    ],
)
def test_a_137_kubelet_watches_only_the_health_service_the_plugin_lists(
    dirs: tuple[Path, Path, Path],
    apiserver: ApiServerStandin,
    versions: tuple[str, ...],
    watched: str | None,
) -> None:
    with KubeletStandin(
        dirs[0],
        plugins_registry_dir=dirs[1],
        apiserver=access(apiserver),
        dra_resource_health="1.37",
    ) as kubelet:
        plugin = WatchedDraPlugin(dirs[1], dirs[2], versions=versions, health=True)
        try:
            plugin.send_health(device("token-0", health_pb.HEALTHY))
            if watched is None:
                driver = driver_of(kubelet.wait_for(registered()))
                assert driver.plugins[0].health_service is None
                # A call through the same channel, answered: still no stream, none on the wire.
                assert kubelet.prepare(DRIVER, [("default", "u", "c")]).error is None
                driver = driver_of(kubelet.snapshot())
                assert (driver.health_streams, driver.health) == (0, ())
                assert plugin.watch_calls() == []
            else:
                driver = driver_of(kubelet.wait_for(health_responses(1)))
                assert driver.plugins[0].health_service == watched.split("/")[1]
                assert driver.device_health(NODE, "token-0").effective == "Healthy"
                assert plugin.health_opened == [watched]
            assert driver.health_errors == ()
        finally:
            plugin.stop()


def test_the_standin_stops_at_once_with_a_health_stream_open(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    """The stream is cancelled (not an error), the health thread ends, the 5 s retry is not
    waited for."""
    kubelet = KubeletStandin(dirs[0], plugins_registry_dir=dirs[1], apiserver=access(apiserver))
    kubelet.start()
    plugin = WatchedDraPlugin(dirs[1], dirs[2], health=True)
    try:
        plugin.send_health(device("token-0", health_pb.HEALTHY))
        kubelet.wait_for(health_responses(1))
        started = time.monotonic()
        kubelet.stop()
        assert time.monotonic() - started < 4.0
        assert [t.name for t in threading.enumerate() if t.name.startswith("kubelet-dra")] == []
        plugin.wait_health_ended()
        driver = driver_of(kubelet.snapshot())
        assert (driver.plugins, driver.health, driver.health_errors) == ((), (), ())
        assert driver.health_streams == 1
    finally:
        kubelet.stop()
        plugin.stop()
