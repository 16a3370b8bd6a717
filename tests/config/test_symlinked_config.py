"""Configuration reached through symlinks: a ConfigMap volume, `ln -sfn`, a link renamed over
the old one, a linked drop-in directory, and a file bind-mounted over the config (subPath).

Every change of a link on the way is a change of the configuration: it is applied as a diff,
and refused, with the last good configuration kept, when the new content is bad.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from tests.config.configmap import DATA, ConfigMapVolume
from tests.harness import AgentProcess
from tests.standin.kubelet import KubeletStandin, KubeletView, serves_exactly


def resources(**counts: int) -> str:
    return "[resources]\n" + "".join(
        f'"example.com/{name}" = {count}\n' for name, count in counts.items()
    )


def serving(**counts: int) -> Callable[[KubeletView], bool]:
    return serves_exactly({f"example.com/{name}": count for name, count in counts.items()})


def registered_once(view: KubeletView) -> bool:
    return all(resource.registrations == 1 for resource in view.resources.values())


@pytest.fixture
def configmap_agent(agent: AgentProcess) -> tuple[AgentProcess, ConfigMapVolume]:
    """The agent reading its main file from a ConfigMap volume, as in the DaemonSet."""
    volume = ConfigMapVolume(agent.workdir / "config")
    agent.config_path = volume.directory / "token-resource.toml"
    agent.dropin_dir = volume.directory / "token-resource.d"
    return agent, volume


def test_a_configmap_update_is_applied_as_a_diff_and_bad_content_is_refused(
    configmap_agent: tuple[AgentProcess, ConfigMapVolume], kubelet: KubeletStandin
) -> None:
    agent, volume = configmap_agent
    volume.write({"token-resource.toml": agent.agent_section() + resources(token=2, seat=1)})
    assert agent.config_path.is_symlink()
    agent.start()
    kubelet.wait_for(serving(token=2, seat=1))

    volume.write({"token-resource.toml": agent.agent_section() + resources(token=5, seat=1)})
    view = kubelet.wait_for(serving(token=5, seat=1))
    assert registered_once(view)
    agent.wait_for_log("reload (file changed): example.com/token count 2 → 5")

    volume.write({"token-resource.toml": agent.agent_section() + '[resources]\n"bad" = 1\n'})
    agent.wait_for_log("rejected, the previous configuration stays")
    assert kubelet.snapshot().counts() == {"example.com/token": 5, "example.com/seat": 1}

    volume.write({"token-resource.toml": agent.agent_section() + resources(token=3)})
    view = kubelet.wait_for(serving(token=3))
    assert view.resources["example.com/token"].registrations == 1
    # Only the current timestamped directory is left, and the agent followed each of them.
    stamped = [entry for entry in volume.directory.iterdir() if entry.name.startswith("..2")]
    assert len(stamped) == 1
    assert agent.log().count("reload (file changed)") == 3


def test_a_drop_in_directory_from_a_configmap_follows_added_changed_and_removed_keys(
    agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    volume = ConfigMapVolume(agent.dropin_dir)
    agent.write_config(resources(token=2))
    volume.write({"10-pool.toml": resources(seat=1)})
    agent.start()
    kubelet.wait_for(serving(token=2, seat=1))
    volume.write({"10-pool.toml": resources(seat=4), "20-more.toml": resources(dongle=1)})
    kubelet.wait_for(serving(token=2, seat=4, dongle=1))
    volume.write({"20-more.toml": resources(dongle=2, token=6)})
    view = kubelet.wait_for(serving(token=6, dongle=2))
    assert view.resources["example.com/token"].registrations == 1
    assert view.resources["example.com/dongle"].registrations == 1


def test_ln_sfn_and_a_link_renamed_over_the_main_file_are_followed(
    agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    versions = agent.workdir / "versions"
    for version, count in (("a", 1), ("b", 2), ("c", 3)):
        (versions / version).mkdir(parents=True)
        (versions / version / "token-resource.toml").write_text(
            agent.agent_section() + resources(token=count)
        )
    agent.config_path.symlink_to(versions / "a" / "token-resource.toml")
    agent.start()
    kubelet.wait_for(serving(token=1))

    subprocess.run(
        ["ln", "-sfn", str(versions / "b" / "token-resource.toml"), str(agent.config_path)],
        check=True,
    )
    kubelet.wait_for(serving(token=2))

    temporary = agent.config_path.with_name(".token-resource.toml.new")
    temporary.symlink_to(versions / "c" / "token-resource.toml")
    temporary.replace(agent.config_path)
    kubelet.wait_for(serving(token=3))

    # The host case: the link's target, a file elsewhere, edited in place.
    target = versions / "c" / "token-resource.toml"
    subprocess.run(
        ["sh", "-c", 'cat > "$1"', "sh", str(target)],
        input=(agent.agent_section() + resources(token=4)).encode(),
        check=True,
    )
    view = kubelet.wait_for(serving(token=4))
    assert registered_once(view)


def test_a_linked_directory_on_the_way_and_a_linked_drop_in_directory_are_followed(
    agent: AgentProcess, kubelet: KubeletStandin
) -> None:
    # etc -> etc.1 holds the main file; the drop-in directory is a link of its own.
    real = agent.workdir / "etc.1"
    real.mkdir()
    (real / "token-resource.toml").write_text(agent.agent_section() + resources(token=1))
    pools = {name: agent.workdir / f"pool-{name}" for name in ("small", "large")}
    for name, count in (("small", 1), ("large", 8)):
        pools[name].mkdir()
        (pools[name] / "50-pool.toml").write_text(resources(seat=count))
    etc = agent.workdir / "etc"
    etc.symlink_to(real)
    agent.config_path = etc / "token-resource.toml"
    agent.dropin_dir = etc / "token-resource.d"
    (real / "token-resource.d").symlink_to(pools["small"])
    agent.start()
    kubelet.wait_for(serving(token=1, seat=1))

    subprocess.run(["ln", "-sfn", str(pools["large"]), str(real / "token-resource.d")], check=True)
    kubelet.wait_for(serving(token=1, seat=8))

    # The directory link on the way swapped to a copy with another count.
    copy = agent.workdir / "etc.2"
    copy.mkdir()
    (copy / "token-resource.toml").write_text(agent.agent_section() + resources(token=7))
    (copy / "token-resource.d").symlink_to(pools["large"])
    subprocess.run(["ln", "-sfn", str(copy), str(etc)], check=True)
    view = kubelet.wait_for(serving(token=7, seat=8))
    assert registered_once(view)


def test_a_file_bind_mounted_over_the_config_is_served_but_never_updated(
    configmap_agent: tuple[AgentProcess, ConfigMapVolume], kubelet: KubeletStandin
) -> None:
    """Kubernetes mounts a ConfigMap key with subPath by bind-mounting the file: the mount
    pins the file of that moment, so later ConfigMap updates never reach the container."""
    agent, volume = configmap_agent
    volume.write({"token-resource.toml": agent.agent_section() + resources(token=2)})
    mounted = agent.workdir / "token-resource.toml"
    mounted.write_text("")
    source = volume.directory / DATA / "token-resource.toml"
    subprocess.run(["mount", "--bind", str(source.resolve()), str(mounted)], check=True)
    try:
        agent.config_path = mounted
        agent.dropin_dir = agent.workdir / "token-resource.d"
        agent.start()
        kubelet.wait_for(serving(token=2))
        volume.write({"token-resource.toml": agent.agent_section() + resources(token=5)})
        # Even an explicit reload reads the pinned file: nothing changes.
        result = agent.cli("reload")
        assert (result.returncode, result.stdout.strip()) == (0, "no change")
        assert kubelet.snapshot().counts() == {"example.com/token": 2}
        assert mounted.read_text().endswith('"example.com/token" = 2\n')
    finally:
        agent.kill()
        subprocess.run(["umount", str(mounted)], check=True)
    assert not os.path.ismount(mounted)
