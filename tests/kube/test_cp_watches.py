"""The agent's watches against the real 1.37 API server when they break: a host agent (the
node's identity; one DRA resource, one node-status resource) reaches the API server through a
relay (tests/relay.py) that the test cuts; while it is cut, the node's slice is deleted and
its Node's capacity removed.

- The connection dropped, the API server still up: each watch goes on from the version it had
  (the API server's watch cache still holds it) and brings the deletion and the change as
  events; no list before them.
- The API server restarted: its new watch cache starts at etcd's revision, past the version
  the agent had (the test's own writes moved it), so the resumed watches get ``410 Gone``, the
  agent lists once, and finds both.

Either way nothing is missed: the slice is published again and the capacity put back. The
stand-in's tests of the same: tests/apiserver/test_watching.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import AgentProcess
from tests.kube.client import JSON_PATCH, resource_version, wait_until
from tests.kube.controlplane import ControlPlane
from tests.kube.test_cp_dra import SLICES, config
from tests.paths import short_temporary_directory
from tests.relay import TcpRelay

NODE = "cp-watches"
USER = f"system:node:{NODE}"
DRIVER = "watches.example.com"
TOKEN, DONGLE = "example.com/token", "example.com/dongle"
RESOURCES = (
    f'[resources."{TOKEN}"]\ncount = 2\nadvertise = "dra"\n'
    f'[resources."{DONGLE}"]\ncount = 4\nadvertise = "node-status"\n'
)
NODE_PATH = f"/api/v1/nodes/{NODE}"
WATCHED = ("resourceslices", "nodes")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: the session's is not restarted under the other
    tests."""
    with ControlPlane(tmp_path_factory.mktemp("restarted-plane")) as control_plane:
        control_plane.add_node(NODE)
        yield control_plane


@dataclass
class Behind:
    """The agent, the relay between it and the API server, and the API server."""

    agent: AgentProcess
    relay: TcpRelay
    plane: ControlPlane
    since: int  # the audit events of the agent's user before it started (an earlier test's)

    def requests(self, since: int | None = None) -> list[dict[str, Any]]:
        """This agent's requests from its audit events' index ``since`` on (all without)."""
        return agent_requests(self.plane, self.since if since is None else since)

    def watching(self) -> bool:
        """Whether the agent's last read of each watched collection is a watch."""
        requests = self.requests()
        return all([e["verb"] for e in reads(requests, r)][-1:] == ["watch"] for r in WATCHED)

    def watched_from(self) -> dict[str, int]:
        """The version each of the agent's open watches started from."""
        return {r: resource_version(reads(self.requests(), r)[-1]) for r in WATCHED}

    def slice_names(self) -> list[str]:
        query = f"?fieldSelector=spec.nodeName={NODE},spec.driver={DRIVER}"
        return [item["metadata"]["name"] for item in self.plane.admin.get(SLICES + query)["items"]]

    def dongles(self) -> str | None:
        capacity: dict[str, str] = self.plane.admin.get(NODE_PATH)["status"]["capacity"]
        return capacity.get(DONGLE)

    def published(self) -> bool:
        return bool(self.slice_names()) and self.dongles() == "4"

    def cut_and_change(self) -> int:
        """The relay cut (the agent's connections shut down when it returns), the slice
        deleted and the capacity removed. The agent's log offset from before the cut."""
        offset = len(self.agent.log())
        self.relay.cut()
        for name in self.slice_names():
            self.plane.admin.delete(f"{SLICES}/{name}")
        self.plane.admin.ok(
            "PATCH",
            f"{NODE_PATH}/status",
            [{"op": "remove", "path": f"/status/capacity/{DONGLE.replace('/', '~1')}"}],
            content_type=JSON_PATCH,
        )
        return offset

    def put_back(self) -> None:
        wait_until(
            "the slice published again and the capacity put back",
            self.published,
            show=lambda: (self.slice_names(), self.dongles(), self.agent.log()[-2000:]),
        )


@pytest.fixture
def behind(plane: ControlPlane, tmp_path: Path) -> Iterator[Behind]:
    with ExitStack() as stack:
        root = stack.enter_context(short_temporary_directory("tr-kube-watch-"))
        relay = stack.enter_context(TcpRelay((plane.host, 0), (plane.host, plane.port)))
        dirs = {name: root / name for name in ("dp", "reg", "plugins", "cdi")}
        for path in dirs.values():
            path.mkdir()
        kubeconfig = plane.write_kubeconfig(
            tmp_path / "kubelet.conf",
            identity=plane.ca.node_certificate(NODE),
            server=f"https://{plane.host}:{relay.port}",
        )
        agent = AgentProcess(tmp_path / "agent", dirs["dp"])
        stack.callback(agent.kill)
        # The default resync: no watch ends of itself during the test.
        agent.write_config(config(dirs, kubeconfig, NODE, DRIVER, RESOURCES))
        setup = Behind(agent, relay, plane, len(plane.audit_events(USER)))
        agent.start()
        wait_until("the slice and the capacity published", setup.published)
        # Its syncs done (the slices' ends with a list): each watch open.
        wait_until("both watches open", setup.watching)
        yield setup


def agent_requests(plane: ControlPlane, since: int) -> list[dict[str, Any]]:
    """The agent's audit events from index ``since`` of its own, each request once: as it
    started answering for a watch (which stays open), as it completed for anything else."""
    events = plane.audit_events(USER)[since:]
    return [
        e
        for e in events
        if e["stage"] == ("ResponseStarted" if e["verb"] == "watch" else "ResponseComplete")
    ]


def reads(requests: list[dict[str, Any]], resource: str) -> list[dict[str, Any]]:
    return [
        e
        for e in requests
        if e["objectRef"]["resource"] == resource and e["verb"] in ("list", "watch")
    ]


def check_the_reads(requests: list[dict[str, Any]], versions: dict[str, int]) -> None:
    """From the cut on, each watched collection: the watch resumed from the version it had
    (the open watch's start, or a later event's or bookmark's), then the sync's list (the
    slices' also a second one, showing its writes done: slicesync.py), then a watch again."""
    for resource, expected in (
        ("resourceslices", ["watch", "list", "list", "watch"]),
        ("nodes", ["watch", "list", "watch"]),
    ):
        mine = reads(requests, resource)
        shown = [(e["verb"], e["requestURI"], e["responseStatus"]["code"]) for e in mine]
        assert [e["verb"] for e in mine] == expected, shown
        assert resource_version(mine[0]) >= versions[resource] > 0, (versions, shown)


def test_a_dropped_connection_resumes_each_watch_where_it_was(behind: Behind) -> None:
    plane = behind.plane
    versions = behind.watched_from()
    before = len(plane.audit_events(USER))
    offset = behind.cut_and_change()
    behind.relay.restore()
    behind.put_back()
    log = behind.agent.log()[offset:]
    assert re.search(r"resource slices: slice \S+ deleted: publishing again", log), log
    assert f"node {NODE}: {DONGLE} differ(s): putting it right" in log, log
    assert "version is gone" not in log, log
    check_the_reads(behind.requests(before), versions)


def test_after_the_api_server_restarts_a_gone_version_means_one_list(behind: Behind) -> None:
    plane = behind.plane
    versions = behind.watched_from()
    before = len(plane.audit_events(USER))
    offset = behind.cut_and_change()
    plane.restart_apiserver()
    behind.relay.restore()
    behind.put_back()
    log = behind.agent.log()[offset:]
    assert "resource slices: the watch's version is gone" in log, log
    assert f"node {NODE}: the watch's version is gone" in log, log
    check_the_reads(behind.requests(before), versions)
