"""The kubelet stand-in's pod sync (tests/standin/kubelet_pods.py) follows the 1.36 kubelet: a
pod whose driver is not registered yet waits for the periodic resync (no back-off, no sync at
the driver's registration), and an annotation change syncs it at once, a status change not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standin.apiserver import MERGE_PATCH, ApiServerStandin, CertificateAuthority
from tests.standin.apiserver.test_apiserver_standin import Client
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.kubelet_pods import FAILED_PREPARE, PodSource, PodSyncView
from tests.standin.test_kubelet_dra import DRIVER, NODE, FakeDraPlugin, access, dirs, registered

__all__ = ["dirs"]  # a fixture

POD = "default/app"
SYNC_FREQUENCY = 3.0
TIMEOUT = 30.0


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE,), tokens={"admin": True}) as standin:
        yield standin


def kubelet(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin, sync_frequency: float
) -> KubeletStandin:
    return KubeletStandin(
        dirs[0],
        plugins_registry_dir=dirs[1],
        node=NODE,
        apiserver=access(apiserver),
        pod_source=PodSource(access(apiserver), sync_frequency=sync_frequency),
    )


def pod_view(view: KubeletView) -> PodSyncView:
    return view.pod_syncs[POD]  # KeyError (wait_for waits) until the kubelet has it


def failed_once(view: KubeletView) -> bool:
    return len(pod_view(view).failed_prepares) >= 1


def prepared(view: KubeletView) -> bool:
    return pod_view(view).prepared_at is not None


def allocate(apiserver: ApiServerStandin) -> None:
    apiserver.allocate_claim(
        "default", "tokens", pod="app", node=NODE, driver=DRIVER, results=[("tokens", NODE, "t0")]
    )


def test_a_pod_waits_for_the_resync_not_for_the_drivers_registration(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    allocate(apiserver)
    with kubelet(dirs, apiserver, SYNC_FREQUENCY) as standin:
        view = standin.wait_for(failed_once, TIMEOUT)
        (failed,) = pod_view(view).failed_prepares
        assert failed.reason == FAILED_PREPARE
        assert failed.message == (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            f"DRA driver {DRIVER} is not registered"
        )
        plugin = FakeDraPlugin(dirs[1], dirs[2])
        try:
            view = standin.wait_for(registered(), TIMEOUT)
            assert view.dra is not None
            registered_at = view.dra.drivers[DRIVER].registered_at
            assert registered_at is not None
            assert registered_at - failed.at < SYNC_FREQUENCY - 1.0, "registered too late"
            view = standin.wait_for(prepared, TIMEOUT)
            shown = pod_view(view)
            assert shown.prepared_at is not None
            # Prepared at the resync, a sync_frequency after the failed sync, not at the
            # registration.
            assert shown.prepared_at - failed.at >= SYNC_FREQUENCY - 0.1
            assert shown.prepared_at - registered_at > 0.5
            assert len(shown.syncs) == 2
            claim = apiserver.snapshot().claims["default/tokens"]
            assert [uids for _, uids in plugin.prepared] == [[claim["metadata"]["uid"]]]
        finally:
            plugin.stop()


def test_an_annotation_change_syncs_at_once_and_a_status_change_does_not(
    dirs: tuple[Path, Path, Path], apiserver: ApiServerStandin
) -> None:
    allocate(apiserver)
    with kubelet(dirs, apiserver, 600.0) as standin:
        standin.wait_for(failed_once, TIMEOUT)
        plugin = FakeDraPlugin(dirs[1], dirs[2])
        try:
            standin.wait_for(registered(), TIMEOUT)
            # A status change reaches the kubelet but does not sync the pod.
            apiserver.set_pod_status("default", "app", {"phase": "Pending", "reason": "x"})
            version = apiserver.snapshot().pods[POD]["metadata"]["resourceVersion"]
            view = standin.wait_for(lambda v: pod_view(v).resource_version == version, TIMEOUT)
            assert len(pod_view(view).syncs) == 1
            assert pod_view(view).prepared_at is None
            client = Client(apiserver, token="admin")
            nudge = {
                "metadata": {"annotations": {f"{DRIVER}/prepare-retry": "2026-01-01T00:00:00Z"}}
            }
            status, _ = client.patch(
                json.dumps(nudge), "/api/v1/namespaces/default/pods/app", MERGE_PATCH
            )
            assert status == 200
            changed = time.monotonic()
            view = standin.wait_for(prepared, TIMEOUT)
            shown = pod_view(view)
            assert shown.prepared_at is not None
            assert shown.prepared_at - changed < 1.0
            assert len(shown.syncs) == 2
        finally:
            plugin.stop()
