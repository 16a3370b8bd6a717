"""Prometheus metrics of the real agent: scraped over HTTP on loopback, and node_exporter's
textfile, against the kubelet stand-in with pods holding tokens."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.harness import TWO_RESOURCES, AgentProcess, write_file
from tests.observe.samples import Samples, parse, scrape, value
from tests.observe.test_status import LICENSE, TOKEN
from tests.standin.kubelet import KubeletStandin, serves_exactly
from tests.standin.podresources import PodResourcesStandin
from token_resource import __version__

T = TypeVar("T")
# Every label the metrics may carry: resource names and fixed words, never pods.
ALLOWED_LABELS = {"resource", "result", "version", "python", "le"}
TIMEOUT = 30.0


def config(agent: AgentProcess, socket_path: Path, resources: str, metrics: str) -> None:
    text = agent.agent_section() + f'pod_resources_socket = "{socket_path}"\n'
    write_file(agent.config_path, text + resources + "\n[metrics]\n" + metrics, atomic=True)


def start_path_probed(
    agent: AgentProcess,
    pod_resources: PodResourcesStandin,
    devices: Path,
    count: int,
    present: Iterable[int],
) -> None:
    """The agent with metrics and ``count`` license tokens, token N usable while
    ``devices``/ttyUSB<N> exists (made for each of ``present``), checked every second."""
    devices.mkdir()
    for index in present:
        (devices / f"ttyUSB{index}").touch()
    probed = (
        f'[resources."{LICENSE}"]\ncount = {count}\n[resources."{LICENSE}".probe]\n'
        f'path = "{devices}/ttyUSB{{index}}"\ninterval = 1\nfailure_threshold = 1\n'
    )
    config(agent, pod_resources.socket_path, probed, 'listen = "127.0.0.1:0"\n')
    agent.start()


def eventually(read: Callable[[], T], holds: Callable[[T], bool], what: str = "metrics") -> T:
    """Polls ``read`` (a scrape, the textfile, Prometheus's API) until ``holds``; the last
    reading on failure."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        reading = read()
        if holds(reading):
            return reading
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never matched; last:\n{reading}")
        time.sleep(0.05)


@pytest.fixture
def textfile(tmp_path: Path) -> Path:
    return tmp_path / "node-exporter" / "token-resource.prom"


@pytest.fixture
def metrics_url(
    agent: AgentProcess,
    kubelet: KubeletStandin,
    pod_resources: PodResourcesStandin,
    textfile: Path,
) -> str:
    """The agent with both outputs, two pods holding three license seats."""
    textfile.parent.mkdir()
    outputs = f'listen = "127.0.0.1:0"\ntextfile = "{textfile}"\n'
    config(agent, pod_resources.socket_path, TWO_RESOURCES, outputs)
    agent.start()
    kubelet.wait_for(serves_exactly({TOKEN: 2, LICENSE: 5}))
    pod_resources.admit_pod("default", "web-1", "app", LICENSE, 2)
    pod_resources.admit_pod("batch", "job-7", "worker", LICENSE, 1)
    found = re.search(r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", agent.log())
    assert found, agent.log()
    return found[1]


def test_a_scrape_shows_tokens_registrations_allocations_and_build(metrics_url: str) -> None:
    samples = scrape(metrics_url)
    expected = {
        ("token_resource_tokens_configured", LICENSE): 5,
        ("token_resource_tokens_configured", TOKEN): 2,
        ("token_resource_registered", LICENSE): 1,
        ("token_resource_tokens_allocated", LICENSE): 3,
        ("token_resource_tokens_free", LICENSE): 2,
        ("token_resource_tokens_allocated", TOKEN): 0,
        ("token_resource_tokens_free", TOKEN): 2,
        ("token_resource_registrations_total", LICENSE): 1,
    }
    assert {key: value(samples, key[0], resource=key[1]) for key in expected} == expected
    assert value(samples, "token_resource_pod_resources_up") == 1
    calls = "token_resource_allocate_duration_seconds_count"
    assert value(samples, calls, resource=LICENSE, result="ok") == 2
    for result in ("applied", "rejected", "failed"):
        assert value(samples, "token_resource_reloads_total", result=result) == 0
    assert value(samples, "token_resource_kubelet_restarts_total") == 0
    assert value(samples, "token_resource_last_reload_successful") == 1
    started = value(samples, "token_resource_last_reload_success_timestamp_seconds")
    assert started is not None
    assert abs(started - time.time()) < 600
    build = [key for key in samples if key[0] == "token_resource_build_info"]
    assert len(build) == 1
    assert ("version", __version__) in build[0][1]


def test_a_kubelet_restart_is_counted_and_allocations_stay(
    metrics_url: str,
    kubelet: KubeletStandin,
    pod_resources: PodResourcesStandin,
) -> None:
    kubelet.restart()
    pod_resources.restart()
    samples = eventually(
        lambda: scrape(metrics_url),
        lambda s: (
            value(s, "token_resource_registrations_total", resource=LICENSE) == 2
            and value(s, "token_resource_registered", resource=LICENSE) == 1
        ),
    )
    assert value(samples, "token_resource_kubelet_restarts_total") == 1
    assert value(samples, "token_resource_tokens_allocated", resource=LICENSE) == 3


def test_reloads_by_result_and_a_resize_below_the_tokens_in_use(
    metrics_url: str, agent: AgentProcess, kubelet: KubeletStandin, textfile: Path
) -> None:
    before = scrape(metrics_url)["token_resource_last_reload_success_timestamp_seconds", ()]
    socket_path = agent.config_path.read_text().split('pod_resources_socket = "')[1].split('"')[0]
    outputs = agent.config_path.read_text().split("[metrics]\n")[1]
    config(agent, Path(socket_path), TWO_RESOURCES.replace("count = 5", "count = 1"), outputs)
    kubelet.wait_for(serves_exactly({TOKEN: 2, LICENSE: 1}))
    samples = eventually(
        lambda: scrape(metrics_url),
        # A write may come as more than one file event, and so more than one reload.
        lambda s: (value(s, "token_resource_reloads_total", result="applied") or 0) >= 1,
    )
    assert value(samples, "token_resource_tokens_configured", resource=LICENSE) == 1
    assert value(samples, "token_resource_tokens_allocated", resource=LICENSE) == 3
    assert value(samples, "token_resource_tokens_free", resource=LICENSE) == 0
    assert samples["token_resource_last_reload_success_timestamp_seconds", ()] >= before

    write_file(agent.config_path, "[resources]\nbroken = ", atomic=True)
    samples = eventually(
        lambda: scrape(metrics_url),
        lambda s: (value(s, "token_resource_reloads_total", result="rejected") or 0) >= 1,
    )
    assert value(samples, "token_resource_tokens_configured", resource=LICENSE) == 1
    assert value(samples, "token_resource_last_reload_successful") == 0


def test_refused_allocate_calls_are_counted_apart(
    metrics_url: str, kubelet: KubeletStandin
) -> None:
    with pytest.raises(Exception, match="unknown device IDs"):
        kubelet.allocate(TOKEN, ["token-9"])
    samples = scrape(metrics_url)
    count = "token_resource_allocate_duration_seconds_count"
    assert value(samples, count, resource=TOKEN, result="refused") == 1
    assert value(samples, count, resource=TOKEN, result="ok") is None


def test_labels_stay_bounded_no_pod_names(metrics_url: str) -> None:
    samples = scrape(metrics_url)
    labels = {name for _, pairs in samples for name, _ in pairs}
    assert labels <= ALLOWED_LABELS
    values = {label_value for _, pairs in samples for _, label_value in pairs}
    assert not values & {"web-1", "job-7", "app", "worker", "default", "batch"}


def test_the_textfile_follows_changes_and_goes_with_the_agent(
    metrics_url: str,
    agent: AgentProcess,
    pod_resources: PodResourcesStandin,
    textfile: Path,
) -> None:
    def read() -> Samples:
        return parse(textfile.read_text()) if textfile.exists() else {}

    allocated = "token_resource_tokens_allocated"
    eventually(read, lambda s: value(s, allocated, resource=LICENSE) == 3)
    pod_resources.remove_pod("default", "web-1")
    samples = eventually(read, lambda s: value(s, allocated, resource=LICENSE) == 1)
    assert value(samples, "token_resource_tokens_free", resource=LICENSE) == 4
    assert oct(textfile.stat().st_mode & 0o777) == "0o644"
    assert agent.stop() == 0
    assert list(textfile.parent.iterdir()) == []  # the file and no temporary left behind


def test_without_the_pod_resources_socket_only_allocation_is_missing(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    config(agent, tmp_path / "missing.sock", TWO_RESOURCES, 'listen = "127.0.0.1:0"\n')
    agent.start()
    kubelet.wait_for(serves_exactly({TOKEN: 2, LICENSE: 5}))
    found = re.search(r"metrics: serving (http://\S+/metrics)", agent.log())
    assert found, agent.log()
    samples = scrape(found[1])
    assert value(samples, "token_resource_pod_resources_up") == 0
    assert value(samples, "token_resource_registered", resource=LICENSE) == 1
    assert not [key for key in samples if key[0] == "token_resource_tokens_allocated"]


def test_a_listen_address_in_use_stops_the_start(
    agent: AgentProcess, kubelet: KubeletStandin, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config(agent, tmp_path / "pr.sock", TWO_RESOURCES, f'listen = "127.0.0.1:{port}"\n')
        agent.start(wait_ready=False)
        assert agent.process is not None
        assert agent.process.wait(TIMEOUT) == 1
    assert "token-resource: metrics: cannot listen: Address already in use" in agent.log()
    assert not list(agent.device_plugin_dir.glob("token-resource.*.sock"))


def test_by_default_no_tcp_port_is_open(agent: AgentProcess, kubelet: KubeletStandin) -> None:
    agent.write_config(TWO_RESOURCES)
    agent.start()
    kubelet.wait_for(serves_exactly({TOKEN: 2, LICENSE: 5}))
    assert agent.process is not None
    inodes = set()
    for link in Path(f"/proc/{agent.process.pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile by a gRPC thread
            inodes.add(os.readlink(link))
    inodes = {target for target in inodes if target.startswith("socket:")}
    listening = {
        f"socket:[{fields[9]}]"
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for fields in (line.split() for line in Path(table).read_text().splitlines()[1:])
    }
    assert inodes, "the agent holds sockets (unix ones)"
    assert not inodes & listening


def test_probes_show_healthy_tokens_checks_by_result_and_their_duration(
    agent: AgentProcess,
    kubelet: KubeletStandin,
    pod_resources: PodResourcesStandin,
    tmp_path: Path,
) -> None:
    devices = tmp_path / "dev"
    start_path_probed(agent, pod_resources, devices, 4, present=(0, 2))
    found = re.search(r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", agent.log())
    assert found, agent.log()

    checks = "token_resource_probe_duration_seconds_count"

    def runs(samples: Samples, result: str) -> float:
        return (
            value(samples, "token_resource_probe_runs_total", resource=LICENSE, result=result) or 0
        )

    def healthy(count: int, result: str) -> Callable[[Samples], bool]:
        # One scrape is not one moment: the counters are read before the agent's report (which
        # waits for its event loop), so a check may show in the one and not yet in the other.
        return lambda samples: (
            value(samples, "token_resource_tokens_healthy", resource=LICENSE) == count
            and runs(samples, result) >= 1
            and (value(samples, checks, resource=LICENSE) or 0) >= 1
        )

    samples = eventually(lambda: scrape(found[1]), healthy(2, "failed"))
    assert value(samples, "token_resource_tokens_free", resource=LICENSE) == 2
    for index in (1, 3):
        (devices / f"ttyUSB{index}").touch()
    samples = eventually(lambda: scrape(found[1]), healthy(4, "passed"))
    assert value(samples, "token_resource_tokens_free", resource=LICENSE) == 4
