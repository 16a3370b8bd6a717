"""The real ``token-resource run`` process against the kubelet stand-in, over real sockets."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.harness import TWO_RESOURCES, AgentProcess, agent_sockets, write_file
from tests.standin.kubelet import KubeletStandin, KubeletView
from token_resource.protocol import deviceplugin_pb2 as pb


def counts(*pairs: tuple[str, int]) -> Callable[[KubeletView], bool]:
    """A predicate: the kubelet holds exactly these allocatable counts, streams open."""
    wanted = dict(pairs)

    def holds(view: KubeletView) -> bool:
        return view.counts() == wanted

    holds.__qualname__ = f"counts == {wanted}"
    return holds


def device_ids(view: KubeletView, name: str) -> list[str]:
    return [device_id for device_id, _ in view.resources[name].devices]


@pytest.fixture
def serving(agent: AgentProcess, kubelet: KubeletStandin) -> AgentProcess:
    agent.write_config(TWO_RESOURCES)
    agent.start()
    kubelet.wait_for(counts(("example.com/token", 2), ("example.com/license", 5)))
    return agent


def test_registers_every_resource_with_stable_ids_and_options(
    serving: AgentProcess, kubelet: KubeletStandin
) -> None:
    view = kubelet.snapshot()
    assert device_ids(view, "example.com/token") == ["token-0", "token-1"]
    assert device_ids(view, "example.com/license") == [f"token-{i}" for i in range(5)]
    token = view.resources["example.com/token"]
    assert token.endpoint == "token-resource/example.com_token.sock"
    assert token.registrations == 1
    assert token.options is not None
    assert token.options.get_preferred_allocation_available
    assert not token.options.pre_start_required
    assert token.register_options == token.options
    assert all(health == "Healthy" for _, health in token.devices)
    assert agent_sockets(serving.device_plugin_dir) == [
        "token-resource/example.com_license.sock",
        "token-resource/example.com_token.sock",
    ]


def test_sd_notify_ready_and_status(serving: AgentProcess, kubelet: KubeletStandin) -> None:
    lines = serving.notify.wait_for(
        lambda lines: any(line.startswith("STATUS=2 resource(s), 2/2 registered") for line in lines)
    )
    assert "READY=1" in lines
    ready = lines.index("READY=1")
    assert lines[ready + 1].startswith("STATUS=2 resource(s)")
    assert "example.com/license=5, example.com/token=2" in lines[ready + 1]
    status = serving.cli("status")
    assert status.stdout.startswith("2 resource(s), 2/2 registered"), (status, serving.log())


def test_allocate_tells_the_container_its_tokens(
    serving: AgentProcess, kubelet: KubeletStandin
) -> None:
    response = kubelet.allocate("example.com/token", ["token-1"])
    assert dict(response.container_responses[0].envs) == {
        "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN": "token-1"
    }
    response = kubelet.allocate("example.com/license", ["token-0", "token-4"])
    assert dict(response.container_responses[0].envs) == {"LICENSE_SEATS": "token-0,token-4"}
    many = pb.AllocateRequest(
        container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["token-0"]),
            pb.ContainerAllocateRequest(devices_ids=["token-1", "token-2"]),
        ]
    )
    response = kubelet.allocate_raw("example.com/license", many)
    assert [dict(c.envs) for c in response.container_responses] == [
        {"LICENSE_SEATS": "token-0"},
        {"LICENSE_SEATS": "token-1,token-2"},
    ]


@pytest.mark.parametrize(
    ("request_", "code", "detail"),
    [
        (pb.AllocateRequest(), grpc.StatusCode.INVALID_ARGUMENT, "no container requests"),
        (
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest()]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "names no device IDs",
        ),
        (
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["token-2"])]
            ),
            grpc.StatusCode.NOT_FOUND,
            "unknown device IDs ['token-2'] (this resource has token-0..token-1)",
        ),
        (
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["gpu-0", "token-01"])]
            ),
            grpc.StatusCode.NOT_FOUND,
            "unknown device IDs ['gpu-0', 'token-01']",
        ),
        (
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["token-0", "token-0"])]
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "repeats device IDs",
        ),
    ],
)
def test_malformed_allocate_gets_a_grpc_error_and_the_agent_keeps_serving(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    request_: pb.AllocateRequest,
    code: grpc.StatusCode,
    detail: str,
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        kubelet.allocate_raw("example.com/token", request_)
    assert raised.value.code() == code
    assert detail in str(raised.value.details())
    assert kubelet.allocate("example.com/token", ["token-0"]).container_responses


def test_preferred_allocation_is_compact_and_predictable(
    serving: AgentProcess, kubelet: KubeletStandin
) -> None:
    available = ["token-4", "token-1", "token-3", "token-0"]
    response = kubelet.get_preferred_allocation("example.com/license", available, ["token-3"], 3)
    assert list(response.container_responses[0].deviceIDs) == ["token-3", "token-0", "token-1"]
    response = kubelet.get_preferred_allocation("example.com/license", available, [], 2)
    assert list(response.container_responses[0].deviceIDs) == ["token-0", "token-1"]


@pytest.mark.parametrize(
    ("available", "must_include", "size", "detail"),
    [
        (["token-0", "token-1"], [], 2**31 - 1, "allocation_size 2147483647"),
        (["token-0", "token-1"], [], -1, "allocation_size -1"),
        (["token-0"], ["token-1"], 1, "not among the available IDs"),
        (["token-0", "token-9"], [], 1, "unknown device IDs ['token-9']"),
        (["token-0", "token-1"], ["token-0", "token-1"], 1, "allocation_size 1"),
    ],
)
def test_malformed_preferred_allocation_gets_a_grpc_error(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    available: list[str],
    must_include: list[str],
    size: int,
    detail: str,
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        kubelet.get_preferred_allocation("example.com/license", available, must_include, size)
    assert detail in str(raised.value.details())
    with pytest.raises(grpc.RpcError):
        kubelet.get_preferred_allocation_raw("example.com/license", pb.PreferredAllocationRequest())
    assert kubelet.snapshot().counts()["example.com/license"] == 5


@pytest.mark.parametrize("atomic", [True, False], ids=["rename", "in-place"])
def test_resize_keeps_ids_and_does_not_re_register_or_disturb_others(
    serving: AgentProcess, kubelet: KubeletStandin, atomic: bool
) -> None:
    before = kubelet.snapshot()
    serving.write_config(
        TWO_RESOURCES.replace('"example.com/token" = 2', '"example.com/token" = 4'), atomic=atomic
    )
    view = kubelet.wait_for(counts(("example.com/token", 4), ("example.com/license", 5)))
    assert device_ids(view, "example.com/token") == [f"token-{i}" for i in range(4)]
    token, license_ = view.resources["example.com/token"], view.resources["example.com/license"]
    assert token.registrations == 1
    assert token.lists_received == before.resources["example.com/token"].lists_received + 1
    assert license_ == before.resources["example.com/license"]

    serving.write_config(
        TWO_RESOURCES.replace('"example.com/token" = 2', '"example.com/token" = 1'), atomic=atomic
    )
    view = kubelet.wait_for(counts(("example.com/token", 1), ("example.com/license", 5)))
    assert device_ids(view, "example.com/token") == ["token-0"]
    assert view.resources["example.com/token"].registrations == 1
    serving.notify.wait_for(lambda lines: lines.count("READY=1") >= 3)
    assert any(line.startswith("RELOADING=1") for line in serving.notify.messages())
    assert any(line.startswith("MONOTONIC_USEC=") for line in serving.notify.assignments())


def test_add_and_remove_resources_live(serving: AgentProcess, kubelet: KubeletStandin) -> None:
    serving.write_config('[resources]\n"example.com/token" = 2\n"acme/dongle" = 3\n')
    # The kubelet keeps a resource whose plugin went away, with allocatable 0.
    view = kubelet.wait_for(
        counts(("example.com/token", 2), ("acme/dongle", 3), ("example.com/license", 0))
    )
    assert view.resources["acme/dongle"].registrations == 1
    assert view.resources["example.com/token"].registrations == 1
    assert agent_sockets(serving.device_plugin_dir) == [
        "token-resource/acme_dongle.sock",
        "token-resource/example.com_token.sock",
    ]


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ('[resources]\n"example.com/token" = \n', "invalid TOML"),
        ('[resources]\n"example.com/token" = -1\n', "between 0 and 100000"),
        ('[resources]\n"kubernetes.io/token" = 1\n', "kubernetes.io"),
        ('[resources]\n"example.com/token" = 1\ncolour = "blue"\n', "colour"),
        ('[resources]\n"example.com/token" = 100001\n', "100000"),
        ('[resources]\n"example.com/token" = 2\n[agent]\ndevice_plugin_dir = "/elsewhere"\n', ""),
        (
            '[resources]\n"example.com/token" = 2\n[resources."example.com/seat"]\ncount = 1\n'
            'advertise = "dra"\nscope = "cluster"\nnodes = "zone in (a"\n',
            "nodes is not a valid label selector: at the end: expected ',' or ')'",
        ),
    ],
    ids=[
        "toml",
        "negative",
        "reserved-domain",
        "bad-name",
        "absurd-count",
        "dup-agent",
        "bad-selector",
    ],
)
def test_a_broken_file_changes_nothing_and_says_why(
    serving: AgentProcess, kubelet: KubeletStandin, broken: str, reason: str
) -> None:
    before = kubelet.snapshot()
    ready = len(serving.notify.assignments())
    serving.write_config(broken, atomic=False)
    lines = serving.notify.wait_for(
        lambda lines: any("last reload rejected" in line for line in lines[ready:])
    )
    status = next(line for line in lines[ready:] if "last reload rejected" in line)
    assert reason in status
    assert str(serving.config_path) in status
    assert "rejected, the previous configuration stays" in serving.log()
    assert kubelet.snapshot().resources == before.resources
    # And the same file through the reload command: a failure, with the reason.
    result = serving.cli("reload")
    assert result.returncode == 1
    assert reason in result.stderr
    assert str(serving.config_path) in result.stderr
    # A good file is applied again afterwards.
    serving.write_config('[resources]\n"example.com/token" = 3\n')
    kubelet.wait_for(lambda view: view.resources["example.com/token"].allocatable == 3)


def test_reload_command_applies_and_reports(serving: AgentProcess, kubelet: KubeletStandin) -> None:
    # Write through a path the watcher does not see: only the command applies it.
    result = serving.cli("reload")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no change"
    serving.write_config(TWO_RESOURCES.replace("count = 5", "count = 6"))
    result = serving.cli("reload")
    assert result.returncode == 0, result.stderr
    assert kubelet.snapshot().counts()["example.com/license"] == 6 or "6" in result.stdout
    kubelet.wait_for(counts(("example.com/token", 2), ("example.com/license", 6)))


def test_sighup_reloads(serving: AgentProcess, kubelet: KubeletStandin) -> None:
    mark = len(serving.notify.assignments())
    serving.signal(signal.SIGHUP)
    serving.notify.wait_for(lambda lines: "READY=1" in lines[mark:])
    assert any(line.startswith("RELOADING=1") for line in serving.notify.assignments()[mark:])
    serving.wait_for_log("reload (SIGHUP): no change")
    assert kubelet.snapshot().resources["example.com/token"].registrations == 1


def test_dropins_add_override_and_remove(serving: AgentProcess, kubelet: KubeletStandin) -> None:
    # The drop-in directory does not exist yet: the agent notices it appear.
    write_file(
        serving.dropin_dir / "10-extra.toml", '[resources]\n"example.com/extra" = 1\n', atomic=True
    )
    kubelet.wait_for(
        counts(("example.com/token", 2), ("example.com/license", 5), ("example.com/extra", 1))
    )
    write_file(
        serving.dropin_dir / "20-override.toml",
        '[resources]\n"example.com/token" = 7\n',
        atomic=False,
    )
    kubelet.wait_for(
        counts(("example.com/token", 7), ("example.com/license", 5), ("example.com/extra", 1))
    )
    (serving.dropin_dir / "10-extra.toml").unlink()
    (serving.dropin_dir / "20-override.toml").rename(
        serving.dropin_dir / "20-override.toml.disabled"
    )
    view = kubelet.wait_for(
        lambda view: (
            not view.resources["example.com/extra"].stream_open
            and view.resources["example.com/token"].allocatable == 2
        )
    )
    assert view.resources["example.com/token"].registrations == 1
    assert agent_sockets(serving.device_plugin_dir) == [
        "token-resource/example.com_license.sock",
        "token-resource/example.com_token.sock",
    ]


def test_a_dropin_changes_only_what_it_sets_and_the_reload_names_each_change(
    serving: AgentProcess, kubelet: KubeletStandin
) -> None:
    # The drop-in sets the license's count: its env stays the main file's LICENSE_SEATS.
    write_file(
        serving.dropin_dir / "50-seats.toml",
        '[resources."example.com/license"]\ncount = 8\n',
        atomic=True,
    )
    kubelet.wait_for(counts(("example.com/token", 2), ("example.com/license", 8)))
    serving.wait_for_log("reload (file changed): example.com/license count 5 → 8")
    allocated = kubelet.allocate("example.com/license", ["token-7"])
    assert dict(allocated.container_responses[0].envs) == {"LICENSE_SEATS": "token-7"}
    # An env change alone is named as such, in the log and in the reload command's answer.
    serving.write_config(TWO_RESOURCES.replace("LICENSE_SEATS", "SEATS"), atomic=True)
    serving.wait_for_log("reload (file changed): example.com/license env LICENSE_SEATS → SEATS")
    write_file(
        serving.dropin_dir / "60-remove.toml",
        '[resources."example.com/token"]\nremove = true\n',
        atomic=True,
    )
    result = serving.cli("reload")
    assert result.returncode == 0, result.stderr
    # The watcher may have applied it first: then the command finds nothing left to do.
    assert result.stdout.strip() in ("removed example.com/token", "no change")
    view = kubelet.wait_for(lambda view: not view.resources["example.com/token"].stream_open)
    assert view.resources["example.com/license"].registrations == 1
    assert "removed example.com/token" in serving.log()


def test_kubelet_restarts_re_register_everything(
    serving: AgentProcess, kubelet: KubeletStandin
) -> None:
    for restarts in range(1, 6):
        kubelet.restart()

        def registered_again(view: KubeletView, restarts: int = restarts) -> bool:
            # Exactly one new registration per kubelet restart: no more is needed.
            return view.counts() == {"example.com/token": 2, "example.com/license": 5} and all(
                resource.registrations == restarts + 1 and resource.stream_open
                for resource in view.resources.values()
            )

        view = kubelet.wait_for(registered_again)
        assert device_ids(view, "example.com/token") == ["token-0", "token-1"]
    # Allocations made before a restart stay valid: the IDs are stable.
    assert kubelet.allocate("example.com/token", ["token-1"]).container_responses


def test_a_burst_of_registrations_is_one_log_line(
    agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    """At 1,000 resources a line per resource and restart would be 1,000 lines: one says it all
    (the per-resource lines are at debug level, which --verbose shows)."""
    names = [f"example.com/r{index}" for index in range(7)]
    agent.write_config("[resources]\n" + "".join(f'"{name}" = 2\n' for name in names))
    agent.start()
    summary = (
        "7 resource(s) registered with the kubelet: example.com/r0=2, example.com/r1=2, "
        "example.com/r2=2, example.com/r3=2, example.com/r4=2, and 2 more"
    )
    agent.wait_for_log(summary)
    kubelet.restart()
    kubelet.wait_for(lambda view: all(r.registrations == 2 for r in view.resources.values()))
    deadline = time.monotonic() + 20
    while agent.log().count(summary) < 2:
        assert time.monotonic() < deadline, agent.log()
        time.sleep(0.02)
    log = agent.log()
    assert log.count(summary) == 2
    assert log.count("registering 7 resource(s)") == 1  # the restart's
    # No line of its own for any resource (the status lines name the first five only).
    assert "example.com/r5" not in log, log
    assert "example.com/r6" not in log, log


def test_kubelet_absent_at_start(agent: AgentProcess, device_plugin_dir: Path) -> None:
    agent.write_config(TWO_RESOURCES)
    agent.start()
    lines = agent.notify.wait_for(lambda lines: "READY=1" in lines)
    assert any("waiting for the kubelet" in line for line in lines)
    assert len(agent_sockets(device_plugin_dir)) == 2
    with KubeletStandin(device_plugin_dir) as kubelet:
        kubelet.wait_for(counts(("example.com/token", 2), ("example.com/license", 5)))
        agent.notify.wait_for(lambda lines: any("2/2 registered" in line for line in lines))


def test_sigterm_removes_sockets_and_exits_zero(
    serving: AgentProcess, kubelet: KubeletStandin
) -> None:
    foreign = serving.device_plugin_dir / "vendor-gpu.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(foreign))
        assert serving.stop() == 0
        assert "STOPPING=1" in serving.notify.assignments()
        assert agent_sockets(serving.device_plugin_dir) == []
        assert not (serving.device_plugin_dir / "token-resource").exists()
        assert foreign.exists()
        assert (serving.device_plugin_dir / "kubelet.sock").exists()
        assert not serving.control_socket.exists()
        kubelet.wait_for(lambda view: not any(r.stream_open for r in view.resources.values()))


def test_stale_sockets_of_ours_are_removed_and_others_left_alone(
    agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    directory = agent.device_plugin_dir
    stale = [socket.socket(socket.AF_UNIX) for _ in range(2)]
    try:
        (directory / "token-resource").mkdir()
        stale[0].bind(str(directory / "token-resource" / "example.com_old.sock"))
        stale[1].bind(str(directory / "vendor.sock"))
        (directory / "token-resource.notes.sock").write_text("a regular file, not ours to touch")
        agent.write_config(TWO_RESOURCES)
        agent.start()
        kubelet.wait_for(counts(("example.com/token", 2), ("example.com/license", 5)))
        assert not (directory / "token-resource" / "example.com_old.sock").exists()
        assert (directory / "vendor.sock").exists()
        assert (directory / "token-resource.notes.sock").read_text().startswith("a regular")
    finally:
        for sock in stale:
            sock.close()


def test_a_second_agent_refuses_to_start(serving: AgentProcess, tmp_path: Path) -> None:
    second = AgentProcess(tmp_path / "second", serving.device_plugin_dir)
    try:
        second.write_config(TWO_RESOURCES)
        second.start(wait_ready=False)
        assert second.process is not None
        assert second.process.wait(20) == 1
        assert "is already serving" in second.log()
        assert serving.process is not None
        assert f"pid {serving.process.pid}" in second.log()
    finally:
        second.kill()


def test_bad_config_at_start_is_one_clear_paragraph(agent: AgentProcess) -> None:
    agent.write_config('[resources]\n"example.com/token" = "two"\n')
    agent.start(wait_ready=False)
    assert agent.process is not None
    assert agent.process.wait(20) == 1
    log = agent.log()
    assert "Traceback" not in log
    assert log.startswith(f"token-resource: invalid configuration: {agent.config_path}, line 4")
    assert 'resources."example.com/token"' in log


def test_watchdog_pings_at_half_the_interval(agent: AgentProcess, kubelet: KubeletStandin) -> None:
    agent.write_config(TWO_RESOURCES)
    agent.start(env={"WATCHDOG_USEC": "400000"})
    agent.notify.wait_for(lambda lines: lines.count("WATCHDOG=1") >= 3)
    agent.signal(signal.SIGSTOP)
    try:
        frozen = agent.notify.assignments().count("WATCHDOG=1")
        # A hung agent must stop pinging; wait one full watchdog period.
        with pytest.raises(AssertionError):
            agent.notify.wait_for(lambda lines: lines.count("WATCHDOG=1") > frozen + 1, timeout=0.6)
    finally:
        agent.signal(signal.SIGCONT)
    agent.notify.wait_for(lambda lines: lines.count("WATCHDOG=1") > frozen + 1)


def test_status_with_a_deadline_fails_while_the_event_loop_stands_still(
    serving: AgentProcess,
) -> None:
    """The liveness probe of the DaemonSet (`token-resource status --timeout 5`), the job the
    systemd watchdog does on a host: answered by the agent's event loop, or a failure."""
    assert serving.cli("status", "--timeout", "5").returncode == 0
    serving.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        stuck = serving.cli("status", "--timeout", "2")
        waited = time.monotonic() - started
    finally:
        serving.signal(signal.SIGCONT)
    assert stuck.returncode == 1
    assert stuck.stderr.startswith("token-resource status: ")
    assert waited < 30
    answered = serving.cli("status", "--timeout", "5")
    assert answered.returncode == 0, answered.stderr
    assert "example.com/token=2" in answered.stdout
