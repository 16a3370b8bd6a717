"""Which package the Ansible role installs on which host (native or bundled).

The choice is the role's filter token_resource_package
(packaging/ansible/roles/token_resource/filter_plugins/token_resource_package.py): first as a
Python function over the facts of each distribution the README's install table names, then
through ansible-playbook itself (the role's tasks/choose.yml against localhost with the facts
of other hosts), which needs the Ansible virtualenv (TOKEN_RESOURCE_ANSIBLE_VENV or
.venv/ansible); without it that test fails.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.packaging.local_playbook import ROLE, run_playbook
from tests.scripts import load_script

# ansible-playbook runs: a minute quiet, more under load.
pytestmark = pytest.mark.timeout(600)

FILTER = load_script(ROLE / "filter_plugins/token_resource_package.py", "token_resource_package")


def facts(distribution: str, version: str, arch: str = "x86_64") -> dict[str, str]:
    """The ansible_facts the filter reads, as `setup` reports them on such a host."""
    families = {"Debian": "Debian", "Ubuntu": "Debian"}
    return {
        "distribution": distribution,
        "distribution_major_version": version.split(".", maxsplit=1)[0],
        "distribution_version": version,
        "os_family": families.get(distribution, "RedHat"),
        "architecture": arch,
    }


def choose(host: dict[str, str], **kwargs: Any) -> dict[str, str]:
    return FILTER.token_resource_package(host, **kwargs)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("host", "flavour", "build"),
    [
        (facts("Debian", "13"), "native", ""),
        (facts("Debian", "12"), "native", ""),
        (facts("Debian", "11"), "bundled", "python3.9-amd64"),
        (facts("Debian", "11", "aarch64"), "bundled", "python3.9-arm64"),
        (facts("Ubuntu", "24.04"), "native", ""),
        (facts("Ubuntu", "22.04"), "bundled", "python3.10-amd64"),
        (facts("Fedora", "41"), "native", ""),
        (facts("Rocky", "9.4"), "bundled", "python3.9-x86_64"),
        (facts("RedHat", "9.5", "aarch64"), "bundled", "python3.9-aarch64"),
        (facts("AlmaLinux", "9.4"), "bundled", "python3.9-x86_64"),
        (facts("Amazon", "2023"), "bundled", "python3.9-x86_64"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_auto_picks_by_distribution_version_and_architecture(
    host: dict[str, str], flavour: str, build: str
) -> None:
    chosen = choose(host)
    assert (chosen["flavour"], chosen["build"]) == (flavour, build), chosen


def test_el9_with_epel_gets_the_native_package() -> None:
    assert choose(facts("Rocky", "9.4"), epel=True)["flavour"] == "native"
    assert choose(facts("RedHat", "9.5"), epel=False)["flavour"] == "bundled"


def test_the_operator_can_force_either() -> None:
    forced = choose(facts("Debian", "12"), flavour="bundled", bundled_python="3.11")
    assert forced == {
        "flavour": "bundled",
        "python": "3.11",
        "arch": "amd64",
        "build": "python3.11-amd64",
    }
    assert choose(facts("Debian", "11"), flavour="native")["flavour"] == "native"


@pytest.mark.parametrize(
    ("host", "kwargs", "message"),
    [
        (facts("Debian", "10"), {}, "set token_resource_package_flavour"),
        (facts("Ubuntu", "20.04"), {}, "set token_resource_package_flavour"),
        (facts("Rocky", "8.9"), {}, "set token_resource_package_flavour"),
        (facts("Debian", "12"), {"flavour": "bundled"}, "set token_resource_bundled_python"),
        (facts("Debian", "11", "ppc64le"), {}, "not 'ppc64le'"),
        (facts("Debian", "12"), {"flavour": "newest"}, "must be one of"),
    ],
)
def test_hosts_it_cannot_place_are_refused_with_the_variable_to_set(
    host: dict[str, str], kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(FILTER.ChoiceError, match=message):
        choose(host, **kwargs)


def test_the_roles_choose_tasks_under_ansible_playbook() -> None:
    hosts = {
        "debian11": facts("Debian", "11"),
        "debian12": facts("Debian", "12"),
        "ubuntu2204": facts("Ubuntu", "22.04", "aarch64"),
        "rocky9": facts("Rocky", "9.4"),
        "rocky9epel": facts("Rocky", "9.4"),
        "amazon2023": facts("Amazon", "2023"),
    }
    files = {
        "python3.9-amd64": "/dist/python3.9/token-resource-bundled_1_amd64.deb",
        "python3.10-arm64": "/dist/python3.10/token-resource-bundled_1_arm64.deb",
        "python3.9-x86_64": "/dist/python3.9/token-resource-bundled-1-1.x86_64.rpm",
    }
    # The role's own tasks/choose.yml, the facts of other hosts set as each host's facts.
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "vars": {"token_resource_bundled_package_files": files},
            "tasks": [
                {"ansible.builtin.set_fact": {"ansible_facts": "{{ fake_facts }}"}},
                {
                    "ansible.builtin.include_role": {
                        "name": "token_resource",
                        "tasks_from": "choose",
                        "defaults_from": "main",
                    }
                },
                {
                    "ansible.builtin.copy": {
                        "content": "{{ {'name': token_resource_install_name,"
                        " 'file': token_resource_install_file,"
                        " 'package': token_resource_package} | to_json }}",
                        "dest": "{{ out_dir }}/{{ inventory_hostname }}.json",
                        "mode": "0644",
                    },
                    "delegate_to": "localhost",
                },
            ],
        }
    ]
    with tempfile.TemporaryDirectory(prefix="ansible-choice-") as tmp:
        directory = Path(tmp)
        run_playbook(
            play,
            {
                name: {
                    "fake_facts": host,
                    **({"token_resource_epel": True} if name == "rocky9epel" else {}),
                }
                for name, host in hosts.items()
            },
            directory,
        )
        chosen = {name: json.loads((directory / f"{name}.json").read_text()) for name in hosts}
    assert chosen["debian11"]["name"] == "token-resource-bundled"
    assert chosen["debian11"]["file"] == files["python3.9-amd64"]
    assert chosen["debian12"] == {
        "name": "token-resource",
        "file": "",
        "package": {"flavour": "native", "python": "", "arch": "", "build": ""},
    }
    assert chosen["ubuntu2204"]["file"] == files["python3.10-arm64"]
    assert chosen["rocky9"]["file"] == files["python3.9-x86_64"]
    assert chosen["rocky9epel"]["name"] == "token-resource"
    assert chosen["amazon2023"]["name"] == "token-resource-bundled"
    assert chosen["amazon2023"]["file"] == files["python3.9-x86_64"]
