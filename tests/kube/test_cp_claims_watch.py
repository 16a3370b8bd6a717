"""The cluster pools' publisher's watch of ResourceClaims against the real 1.37 API server when
it breaks: the publisher (its ServiceAccount) reaches the API server through a relay
(tests/relay.py) that the test cuts; while it is cut, two claims are allocated seats of its
pool and the claim that held one is deleted.

- The connection dropped, the API server still up: the watch goes on from the version it had
  and brings the three changes as events; no list.
- The API server restarted: its new watch cache starts past that version, so the resumed
  watch gets ``410 Gone`` and the publisher lists the claims once.

Either way it counts what the claims hold: 2 seats allocated, not the 1 it had (nothing seen)
nor 3 (the deletion missed). The node agent's watches: test_cp_watches.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess
from tests.kube.client import resource_version, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.publishers import (
    ACCOUNT,
    CLAIMS,
    NAMESPACE,
    account_kubeconfig,
    cluster_resource,
    publisher_config,
    publishers,
    rbac,
    status_of,
)
from tests.relay import TcpRelay
from token_resource.apiserver.objects.slices import cluster_pool_name, device_class_name
from token_resource.config.names import token_id

DRIVER = "claims-watch.example.com"
SEAT = "example.com/seat"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: the session's is not restarted under the other
    tests."""
    with ControlPlane(tmp_path_factory.mktemp("claims-plane")) as control_plane:
        rbac(control_plane)
        yield control_plane


def allocate(plane: ControlPlane, name: str, seat: int) -> None:
    """A claim of the seat resource, allocated ``seat`` as the scheduler writes it."""
    request = {"name": "seat", "exactly": {"deviceClassName": device_class_name(SEAT)}}
    claim = plane.admin.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [request]}},
        },
    )
    result = {
        "request": "seat",
        "driver": DRIVER,
        "pool": cluster_pool_name(SEAT),
        "device": token_id(seat),
    }
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    plane.admin.ok("PUT", f"{CLAIMS}/{name}/status", claim)


@dataclass
class Behind:
    """The publisher, the relay between it and the API server, and the API server."""

    publisher: AgentProcess
    relay: TcpRelay
    plane: ControlPlane
    since: int  # the publisher's audit events before it started (an earlier test's)

    def allocated(self) -> int | None:
        [pool] = status_of(self.publisher)["pools"]
        return pool["allocated"]  # type: ignore[no-any-return]

    def claim_reads(self) -> list[dict[str, Any]]:
        """Its lists and watches of claims: a watch as it started (it stays open), a list
        as it completed."""
        return [
            event
            for event in self.plane.audit_events(USER)[self.since :]
            if event["objectRef"]["resource"] == "resourceclaims"
            and event["verb"] in ("list", "watch")
            and event["stage"]
            == ("ResponseStarted" if event["verb"] == "watch" else "ResponseComplete")
        ]

    def watching(self) -> bool:
        return [e["verb"] for e in self.claim_reads()][-1:] == ["watch"]

    def cut_and_change(self) -> tuple[int, int]:
        """The relay cut, two seats allocated and the holder of one deleted: (how many claim
        reads the publisher had made, the version its open watch started from)."""
        reads = self.claim_reads()
        self.relay.cut()
        allocate(self.plane, "second", 1)
        allocate(self.plane, "third", 2)
        self.plane.admin.delete(f"{CLAIMS}/first")
        return len(reads), resource_version(reads[-1])

    def counted_again(self) -> list[dict[str, Any]]:
        """The relay restored, the publisher's count right; its claim reads since then."""
        self.relay.restore()
        wait_until(
            "the publisher counts the 2 seats the claims hold",
            lambda: self.allocated() == 2,
            show=lambda: (self.allocated(), self.publisher.log()[-2000:]),
        )
        return self.claim_reads()


@pytest.fixture
def behind(plane: ControlPlane, tmp_path: Path) -> Iterator[Behind]:
    with ExitStack() as stack:
        relay = stack.enter_context(TcpRelay((plane.host, 0), (plane.host, plane.port)))
        kubeconfig = account_kubeconfig(
            plane, tmp_path / "sa.conf", f"https://{plane.host}:{relay.port}"
        )
        config = publisher_config(kubeconfig, DRIVER, cluster_resource(SEAT, 3))
        since = len(plane.audit_events(USER))
        (publisher,) = stack.enter_context(publishers(tmp_path, config, "p"))
        for name in ("first", "second", "third"):
            stack.callback(plane.admin.delete, f"{CLAIMS}/{name}")
        setup = Behind(publisher, relay, plane, since)
        allocate(plane, "first", 0)
        wait_until("the publisher counts the first seat", lambda: setup.allocated() == 1)
        wait_until("its watch of the claims open", setup.watching)
        yield setup


def test_a_dropped_connection_resumes_the_claims_watch_where_it_was(behind: Behind) -> None:
    before, version = behind.cut_and_change()
    after = behind.counted_again()[before:]
    shown = [(e["verb"], e["requestURI"]) for e in after]
    assert [e["verb"] for e in after] == ["watch"], shown
    assert resource_version(after[0]) >= version > 0, (version, shown)


def test_after_the_api_server_restarts_a_gone_version_means_one_list(behind: Behind) -> None:
    offset = len(behind.publisher.log())
    before, _ = behind.cut_and_change()
    behind.plane.restart_apiserver()
    after = behind.counted_again()[before:]
    shown = [(e["verb"], e["requestURI"]) for e in after]
    assert [e["verb"] for e in after] == ["watch", "list", "watch"], shown
    assert "resource claims: the watch's version is gone" in behind.publisher.log()[offset:]
