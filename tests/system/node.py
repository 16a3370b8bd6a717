"""A booted container seen as a Kubernetes node: the agent's unit, config and the kubelet."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tests.system.harness import Node

UNIT = "token-resource.service"
# Where the .deb installs the unit, on Debian 12 and Debian 13 alike.
UNIT_FILE = f"/usr/lib/systemd/system/{UNIT}"
CONFIG = "/etc/token-resource.toml"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
STATE_FILE = "/run/kubelet-standin/state.json"


def kubelet_unit(*arguments: str, pythonpath: tuple[str, ...] = ("/srv/test",)) -> str:
    """The kubelet stand-in as a real unit, so that the agent's ordering against
    kubelet.service means something. `systemctl reload kubelet` is a kubelet restart inside the
    process (every file in the directory but the checkpoint wiped, a new kubelet.sock), like a
    real kubelet's. ``arguments`` go to tests/standin/kubelet_script.py; ``pythonpath`` is where
    its files (/srv/test/tests/standin, tests/system/conftest.py's STANDIN_FILES) and what it
    imports (grpc, the agent's token_resource) are found, first to last."""
    command = [
        "/usr/bin/python3", "-u", "-m", "tests.standin.kubelet_script",
        "--dir", PLUGIN_DIR, "--state-file", STATE_FILE, *arguments,
    ]  # fmt: skip
    return f"""\
[Unit]
Description=kubelet stand-in (device-plugin registration) for the system tests

[Service]
Environment=PYTHONPATH={":".join(pythonpath)}
ExecStart={" ".join(command)}
ExecReload=/bin/kill -HUP $MAINPID
RuntimeDirectory=kubelet-standin
RuntimeDirectoryPreserve=yes

[Install]
WantedBy=multi-user.target
"""


KUBELET_UNIT = kubelet_unit()

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll probe() until it returns something truthy; fail naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def config_text(resources: Mapping[str, int]) -> str:
    lines = ["# written by the system tests", "[resources]"]
    lines += [f'"{name}" = {count}' for name, count in resources.items()]
    return "\n".join(lines) + "\n"


class AgentNode(Node):
    # --- the agent's unit ----------------------------------------------------------------

    def show(self, prop: str, unit: str = UNIT) -> str:
        return self.exec(["systemctl", "show", "-p", prop, "--value", unit]).stdout.strip()

    def main_pid(self) -> int:
        return int(self.show("MainPID"))

    def systemctl(self, *args: str, check: bool = True, timeout: float = 120):  # type: ignore[no-untyped-def]
        return self.exec(["systemctl", *args], check=check, timeout=timeout)

    def unit_journal(self, unit: str = UNIT) -> str:
        return self.exec(["journalctl", "-b", "--no-pager", "-u", unit], check=False).stdout

    def write_config(self, resources: Mapping[str, int]) -> None:
        self.write(CONFIG, config_text(resources))

    def plugin_dir(self) -> list[str]:
        result = self.exec(["ls", "-A", PLUGIN_DIR], check=False)
        return sorted(result.stdout.split()) if result.returncode == 0 else []

    def agent_sockets(self) -> list[str]:
        """The agent's sockets, relative to the device-plugin directory: in its own
        directory there, or beside kubelet.sock (the fallback layout)."""
        own = self.exec(
            ["find", f"{PLUGIN_DIR}/token-resource", "-maxdepth", "1", "-type", "s"], check=False
        )
        beside = self.exec(
            ["find", PLUGIN_DIR, "-maxdepth", "1", "-type", "s", "-name", "token-resource.*"],
            check=False,
        )
        found = own.stdout.split() + beside.stdout.split()
        return sorted(line.removeprefix(f"{PLUGIN_DIR}/") for line in found)

    # --- the kubelet stand-in -----------------------------------------------------------

    def install_kubelet(self, start: bool = True) -> None:
        self.write("/etc/systemd/system/kubelet.service", KUBELET_UNIT)
        self.systemctl("daemon-reload")
        self.systemctl("enable", *(["--now"] if start else []), "kubelet.service")

    def kubelet_view(self) -> dict[str, Any] | None:
        result = self.exec(["cat", STATE_FILE], check=False)
        if result.returncode != 0 or not result.stdout.strip():
            return None
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def wait_for_view(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30
    ) -> dict[str, Any]:
        """The first kubelet view satisfying predicate; fails with the last view seen."""
        seen: list[dict[str, Any] | None] = [None]

        def probe() -> dict[str, Any] | None:
            view = self.kubelet_view()
            seen[0] = view
            return view if view is not None and predicate(view) else None

        try:
            return wait_for(probe, timeout, what, interval=0.2)
        except AssertionError as error:
            raise AssertionError(
                f"{error}; the kubelet sees:\n{json.dumps(seen[0], indent=1)}"
            ) from None

    def wait_for_counts(
        self,
        counts: Mapping[str, int],
        timeout: float = 30,
        min_generation: int = 0,
        min_registrations: int = 0,
    ) -> dict[str, Any]:
        """Wait until the kubelet has exactly these resources, each allocatable = count."""

        def matches(view: dict[str, Any]) -> bool:
            resources = view["resources"]
            live = {
                name: r["allocatable"]
                for name, r in resources.items()
                if r["stream_open"] and r["allocatable"] > 0
            }
            return (
                live == dict(counts)
                and view["generation"] >= min_generation
                and all(resources[name]["registrations"] >= min_registrations for name in counts)
            )

        return self.wait_for_view(matches, f"the kubelet to see {dict(counts)}", timeout)
