"""`token-resource check`: the effective settings of every resource, and where each came from."""

from __future__ import annotations

from pathlib import Path

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
        "  example.com/license: 8 token(s) in $LICENSE_SEATS, "
        "socket token-resource.example.com_license.sock",
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
