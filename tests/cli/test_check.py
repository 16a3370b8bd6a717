"""`token-resource check`: what every resource becomes, each setting and where it came from;
or every error in the files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import AgentProcess, write_file


def check(agent: AgentProcess) -> tuple[int, str, str]:
    result = agent.cli("check")
    return result.returncode, result.stdout, result.stderr


def test_check_shows_each_setting_with_the_file_it_came_from(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path, Path("/var/lib/kubelet/device-plugins"))
    try:
        agent.config_path.write_text(
            '[resources]\n"example.com/token" = 2\n'
            '[resources."example.com/license"]\ncount = 5\nenv = "LICENSE_SEATS"\n'
        )
        write_file(
            agent.dropin_dir / "50-seats.toml",
            '[resources."example.com/license"]\ncount = 8\n'
            '[resources."example.com/token"]\nremove = true\n',
            atomic=True,
        )
        code, out, err = check(agent)
    finally:
        agent.kill()
    dropin = agent.dropin_dir / "50-seats.toml"
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{agent.config_path}: valid ({agent.config_path}, {dropin})",
        "device-plugin directory: /var/lib/kubelet/device-plugins",
        "  example.com/license: device plugin: 8 token(s) on socket "
        "token-resource/example.com_license.sock, IDs in $LICENSE_SEATS",
        f"    count = 8  ({dropin})",
        f'    env = "LICENSE_SEATS"  ({agent.config_path})',
        '    advertise = "device-plugin"  (default)',
        f"  example.com/token: removed by {dropin}",
    ]


def test_check_refuses_an_empty_main_file_as_an_incomplete_write(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path, Path("/var/lib/kubelet/device-plugins"))
    try:
        agent.config_path.write_text("")
        code, out, err = check(agent)
    finally:
        agent.kill()
    assert (code, out) == (1, "")
    assert err == (
        f"token-resource: invalid configuration: {agent.config_path}: the main file defines "
        "nothing (empty, or only comments): an incomplete write? To serve no resources, write "
        "an empty [resources] table\n"
    )


@pytest.mark.parametrize("readable", [True, False], ids=["readable", "missing"])
def test_check_shows_what_each_resource_becomes(tmp_path: Path, readable: bool) -> None:
    kubeconfig = tmp_path / "kubelet.conf"
    if readable:
        kubeconfig.write_text("apiVersion: v1\n")
    agent = AgentProcess(tmp_path, Path("/var/lib/kubelet/device-plugins"))
    try:
        agent.config_path.write_text(
            f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "node-1"\n'
            '[resources]\n"example.com/token" = 2\n'
        )
        dropin = agent.dropin_dir / "50-dongle.toml"
        write_file(
            dropin,
            '[resources."example.com/dongle"]\ncount = 4\nadvertise = "node-status"\n',
            atomic=True,
        )
        code, out, err = check(agent)
    finally:
        agent.kill()
    assert (code, err) == (0, "")
    access = (
        "readable"
        if readable
        else "not readable: No such file or directory; the agent retries until it is"
    )
    assert out.splitlines() == [
        f"{agent.config_path}: valid ({agent.config_path}, {dropin})",
        "device-plugin directory: /var/lib/kubelet/device-plugins",
        f"API server: Node node-1 (from node_name), kubeconfig {kubeconfig} ({access})",
        "  example.com/dongle: node status: capacity 4 on Node node-1 "
        "(no socket, no environment variable)",
        f"    count = 4  ({dropin})",
        f'    advertise = "node-status"  ({dropin})',
        "  example.com/token: device plugin: 2 token(s) on socket "
        "token-resource/example.com_token.sock, IDs in $TOKEN_RESOURCE_EXAMPLE_COM_TOKEN",
        f"    count = 2  ({agent.config_path})",
        '    env = "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"  (default)',
        '    advertise = "device-plugin"  (default)',
    ]


def test_check_reports_every_error_in_the_files_in_one_run(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path, Path("/var/lib/kubelet/device-plugins"))
    main, broken, clashing = (
        agent.config_path,
        agent.dropin_dir / "10-broken.toml",
        agent.dropin_dir / "20-clashing.toml",
    )
    try:
        main.write_text(
            '[resources]\n"example.com/token" = -1\n"bad" = 2\n'
            "[agent]\nfoo = 1\n[kubernetes]\nresync_seconds = 0\n"
        )
        write_file(broken, "x = \n", atomic=True)
        code, out, err = check(agent)
        prefix = "token-resource: invalid configuration:"
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            f'{prefix} {main}, line 5, key agent.foo: unknown key "foo"; allowed: '
            "device_plugin_dir, pod_resources_socket",
            f"{prefix} {main}, line 7, key kubernetes.resync_seconds: resync_seconds must be a "
            "number between 1 and 3600, got 0",
            f'{prefix} {main}, line 2, key resources."example.com/token": count must be an '
            "integer between 0 and 100000, got -1",
            f'{prefix} {main}, line 3, key resources.bad: a resource name must be "<domain>/<name>"'
            ' with exactly one "/"',
            f"{prefix} {broken}, line 1: invalid TOML: Invalid value",
        ]

        # Once every file parses, what only the files together can get wrong, all of it.
        main.write_text("[resources]\n")
        broken.unlink()
        write_file(
            clashing,
            '[resources."a.com/x"]\ncount = 1\nenv = "A"\n'
            '[resources."a.com/y"]\ncount = 1\nenv = "A"\n'
            '[resources."a.com/z"]\nenv = "B"\n',
            atomic=True,
        )
        code, out, err = check(agent)
    finally:
        agent.kill()
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f'{prefix} {clashing}, line 7, key resources."a.com/z": count is required: no file sets '
        "it for this resource",
        f'{prefix} {clashing}, line 4, key resources."a.com/y": env "A" is also the env of '
        f'resource "a.com/x" (defined in {clashing}); set a different env for one of them',
    ]


def test_check_reports_every_socket_path_too_long_for_device_plugins_only(
    tmp_path: Path,
) -> None:
    agent = AgentProcess(tmp_path, Path("/var/lib/kubelet/device-plugins"))
    directory = "/" + "d" * 60 + "/" + "e" * 60
    try:
        agent.config_path.write_text(
            f'[agent]\ndevice_plugin_dir = "{directory}"\n'
            '[resources]\n"example.com/a" = 1\n"example.com/b" = 1\n'
            '[resources."example.com/c"]\ncount = 1\nadvertise = "node-status"\n'
        )
        code, out, err = check(agent)
    finally:
        agent.kill()
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert all("key agent.device_plugin_dir" in line for line in lines)


def test_check_shows_a_cluster_pool_its_scope_and_nodes(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubelet.conf"
    kubeconfig.write_text("apiVersion: v1\n")
    agent = AgentProcess(tmp_path, Path("/var/lib/kubelet/device-plugins"))
    dropin = agent.dropin_dir / "50-zone.toml"
    try:
        agent.config_path.write_text(
            f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "node-1"\n'
            '[resources."example.com/seat"]\ncount = 20\nadvertise = "dra"\nscope = "cluster"\n'
            '[resources."example.com/floating"]\ncount = 3\nadvertise = "dra"\n'
            'scope = "cluster"\n'
        )
        write_file(
            dropin, '[resources."example.com/seat"]\nnodes = "zone in (a,b), !spot"\n', atomic=True
        )
        code, out, err = check(agent)
    finally:
        agent.kill()
    assert (code, err) == (0, "")
    main = agent.config_path
    assert out.splitlines() == [
        f"{main}: valid ({main}, {dropin})",
        "device-plugin directory: /var/lib/kubelet/device-plugins",
        f"API server: Node node-1 (from node_name), kubeconfig {kubeconfig} (readable)",
        "DRA driver token-resource: registration socket in "
        "/var/lib/kubelet/plugins_registry, service socket in "
        "/var/lib/kubelet/plugins/token-resource, CDI specs in /var/run/cdi",
        "  example.com/floating: DRA, cluster-wide: 3 token(s) for every node as the devices of "
        "pool example.com/floating (driver token-resource), published by the elected publisher;"
        " this node prepares their claims, IDs in $TOKEN_RESOURCE_EXAMPLE_COM_FLOATING through "
        "CDI",
        f"    count = 3  ({main})",
        '    env = "TOKEN_RESOURCE_EXAMPLE_COM_FLOATING"  (default)',
        f'    advertise = "dra"  ({main})',
        f'    scope = "cluster"  ({main})',
        '  example.com/seat: DRA, cluster-wide: 20 token(s) for the nodes "zone in (a,b), !spot" '
        "as the devices of pool example.com/seat (driver token-resource), published by the "
        "elected publisher; this node prepares their claims, IDs in "
        "$TOKEN_RESOURCE_EXAMPLE_COM_SEAT through CDI",
        f"    count = 20  ({main})",
        '    env = "TOKEN_RESOURCE_EXAMPLE_COM_SEAT"  (default)',
        f'    advertise = "dra"  ({main})',
        f'    scope = "cluster"  ({main})',
        f'    nodes = "zone in (a,b), !spot"  ({dropin})',
    ]
