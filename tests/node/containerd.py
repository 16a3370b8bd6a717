"""containerd 2.x as the real node's runtime: the CRI plugin with CDI (its default in 2.x),
Debian's runc and CNI plugins, and a root, state directory and socket of its own, so that it
never meets another containerd on the machine (the system tests start theirs).

What this machine needs that a node does not (../shared/docs/real-node.md): the cgroupfs
driver, and ``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE in the bounding set: runc could not
lower a container's oom_score_adj). The network namespaces are mounted under the state
directory, which a simulated reboot wipes as a real one wipes /run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.kube.programs import built
from tests.node.images import IMAGES, PAUSE
from tests.node.machine import MachineChanges, unmount_under
from tests.node.processes import Process
from token_resource.host.listeners import nobody_listens

NAMESPACE = "k8s.io"  # the CRI plugin's namespace
RUN_CDI = Path("/var/run/cdi")  # where DRA drivers write their specs: a tmpfs on a real node
CDI_DIRECTORIES = (Path("/etc/cdi"), RUN_CDI)
RUNC = Path("/usr/sbin/runc")
CNI_PLUGINS = Path("/usr/lib/cni")
# Where every containerd's shims put their sockets (defaults.DefaultStateDir/s), whatever its
# own state directory.
SHIM_SOCKETS = Path("/run/containerd/s")
START_TIMEOUT = 60.0


def program(name: str) -> Path:
    return built("node", name)


class Containerd:
    """One containerd; ``start`` and ``stop`` may be called again (a reboot)."""

    def __init__(self, directory: Path, socket_directory: Path, pod_network: PodNetwork) -> None:
        """``directory``: root (on disk) and state (a tmpfs on a real machine); the socket in
        ``socket_directory``, short enough for its path."""
        self.root = directory / "root"
        self.state = directory / "state"
        self.address = socket_directory / "containerd.sock"
        self.config = directory / "config.toml"
        self.log = directory / "containerd.log"
        self._pod_network = pod_network
        self._process: Process | None = None
        self._shim_sockets_before: set[str] = set()
        self._cdi_specs_before: set[str] = set()

    @property
    def endpoint(self) -> str:
        return f"unix://{self.address}"

    def write_config(self) -> None:
        self.config.write_text(
            f"""\
version = 3
root = "{self.root}"
state = "{self.state}"
# No /opt/containerd (opt), no /var/run/nri (nri), no tracing exporter.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{self.address}"

[ttrpc]
  address = "{self.address}.ttrpc"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE.reference}"

[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = {json.dumps([str(d) for d in CDI_DIRECTORIES])}
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "{RUNC}"
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{CNI_PLUGINS}"]
  conf_dir = "{self._pod_network.conf_dir}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""
        )

    def prepare(self, machine: MachineChanges) -> None:
        """The machine's side, once: the shims' socket directory, which every containerd
        shares; the sockets our shims leave there removed afterwards."""
        machine.directory(SHIM_SOCKETS)
        self._shim_sockets_before = set(os.listdir(SHIM_SOCKETS))
        machine.record("containerd's shim sockets", self.remove_dead_shim_sockets)
        machine.directory(RUN_CDI)
        self._cdi_specs_before = set(os.listdir(RUN_CDI))
        machine.record("the CDI specs written on the node", self.remove_new_cdi_specs)
        self.write_config()

    def new_cdi_specs(self) -> list[Path]:
        """The CDI specs in /var/run/cdi written since the node was set up (by its agents)."""
        if not RUN_CDI.is_dir():
            return []
        return [RUN_CDI / name for name in set(os.listdir(RUN_CDI)) - self._cdi_specs_before]

    def remove_new_cdi_specs(self) -> None:
        for spec in self.new_cdi_specs():
            spec.unlink(missing_ok=True)

    def remove_dead_shim_sockets(self) -> None:
        if not SHIM_SOCKETS.is_dir():
            return
        for name in set(os.listdir(SHIM_SOCKETS)) - self._shim_sockets_before:
            path = SHIM_SOCKETS / name
            if nobody_listens(path):
                path.unlink(missing_ok=True)

    def start(self) -> None:
        environment = {**os.environ, "PATH": f"{program('containerd').parent}:{os.environ['PATH']}"}
        self._process = Process.start(
            "containerd", [str(program("containerd")), "--config", str(self.config)], self.log,
            environment,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers():
            self._process.check_running()
            if time.monotonic() > deadline:
                raise AssertionError(f"containerd did not answer in {START_TIMEOUT} s")
            time.sleep(0.1)

    def answers(self) -> bool:
        return self.address.exists() and self.ctr("version", check=False).returncode == 0

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(program("ctr")), "--address", str(self.address), "--namespace", NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)}: {done.returncode}: {done.stderr}")
        return done

    def import_images(self, *archives: Path) -> None:
        for archive in [*(images_directory() / image.archive for image in IMAGES), *archives]:
            self.ctr("images", "import", str(archive))

    def tasks(self) -> dict[str, int]:
        """Each running task's container ID and PID."""
        listed = self.ctr("tasks", "list", check=False).stdout.splitlines()[1:]
        return {fields[0]: int(fields[1]) for fields in (line.split() for line in listed)}

    def shim_pids(self) -> list[int]:
        shim = str(program("containerd-shim-runc-v2"))
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.readlink(entry / "exe") == shim:
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def stop(self) -> None:
        """containerd, asked to stop (its shims and containers run on, as on a real node)."""
        if self._process is not None:
            self._process.stop()
            self._process = None

    def crash(self, container_pids: list[int]) -> None:
        """What a power cut leaves: every container and shim killed, containerd stopped, and
        its state directory (/run on a real machine) gone with what was mounted there."""
        for pid in [*container_pids, *self.shim_pids()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        self.stop()
        unmount_under(self.state)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.state)], check=False)


def images_directory() -> Path:
    return program("containerd").parent / "images"


class PodNetwork:
    """The pods' network: a CNI bridge of its own (``bridge`` with host-local addresses), its
    leases kept on disk as a node keeps them, and routes through the bridge's gateway to the
    Service range (no kube-proxy runs: the API server's Service address is the node's own,
    network.py) and to the node's address (what a probe of a pod's agent may dial); nothing
    else: no default route off the machine."""

    def __init__(
        self, directory: Path, bridge: str, subnet: str, service_range: str, node_ip: str
    ) -> None:
        self.conf_dir = directory / "net.d"
        self.leases = directory / "leases"
        self.bridge = bridge
        self.subnet = subnet
        self.service_range = service_range
        self.node_ip = node_ip

    def write(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        gateway = self.subnet.rsplit(".", 1)[0] + ".1"
        config = {
            "cniVersion": "1.0.0",
            "name": "token-resource-test",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.leases),
                        "ranges": [[{"subnet": self.subnet, "gateway": gateway}]],
                        "routes": [
                            {"dst": self.service_range, "gw": gateway},
                            {"dst": f"{self.node_ip}/32", "gw": gateway},
                        ],
                    },
                },
            ],
        }
        (self.conf_dir / "10-token-resource-test.conflist").write_text(json.dumps(config, indent=2))
