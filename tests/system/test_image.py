"""The container image (`make image`) under a real OCI runtime, runc, as a DaemonSet runs it.

The image's archive is unpacked the way a runtime's image store does it (index → manifest →
config and layer, digests checked) into a runc bundle. The container runs with a read-only root,
every capability dropped, no privilege escalation and no network (an empty network namespace),
the kubelet's device-plugin directory bind-mounted from the host, where the kubelet stand-in
serves, and a ConfigMap-shaped directory updated by the kubelet's ..data swap.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.config.configmap import ConfigMapVolume
from tests.scripts import oci_module
from tests.standin.kubelet import KubeletStandin, serves_exactly
from tests.system import harness
from tests.system.conftest import REPO, base_image
from tests.system.harness import project_version

CONTAINERFILE = REPO / "packaging/image/Containerfile"
MAX_UNCOMPRESSED_MB = 150
RUNC_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def unpacked(image: Path, session_dir: Path) -> tuple[dict[str, Any], Path]:
    """(the image config, a root file system unpacked from its layers), digests verified."""
    blobs: dict[str, bytes] = {}
    with tarfile.open(image) as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert json.loads(_read(archive, members["oci-layout"])) == {"imageLayoutVersion": "1.0.0"}

        def blob(descriptor: dict[str, Any]) -> bytes:
            data = _read(archive, members["blobs/sha256/" + descriptor["digest"][7:]])
            assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
            assert len(data) == descriptor["size"]
            return data

        (manifest_descriptor,) = json.loads(_read(archive, members["index.json"]))["manifests"]
        # Named as deploy/kubernetes/base runs it, for `ctr images import` (test_image_import.py).
        assert manifest_descriptor["annotations"] == {
            "io.containerd.image.name": base_image(),
            "org.opencontainers.image.ref.name": project_version(),
        }
        manifest = json.loads(blob(manifest_descriptor))
        config = json.loads(blob(manifest["config"]))
        rootfs = session_dir / "image-rootfs"
        rootfs.mkdir()
        for layer in manifest["layers"]:
            assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
            blobs[layer["digest"]] = blob(layer)
            layer_file = session_dir / "layer.tar.gz"
            layer_file.write_bytes(blobs[layer["digest"]])
            harness.run(["tar", "-C", str(rootfs), "-xzf", str(layer_file)], timeout=300)
            layer_file.unlink()
    return config, rootfs


def _read(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    stream = archive.extractfile(member)
    assert stream is not None
    return stream.read()


def test_the_image_is_small_built_from_debian_packages_and_in_step_with_the_containerfile(
    unpacked: tuple[dict[str, Any], Path], image: Path
) -> None:
    config, rootfs = unpacked
    # The Containerfile is the one source of the image's settings.
    expected = oci_module().containerfile_settings(CONTAINERFILE.read_text())
    expected["Labels"]["org.opencontainers.image.version"] = project_version()
    assert config["config"] == expected
    assert config["config"]["Entrypoint"] == ["token-resource", "run"]
    size_mb = _tree_size(rootfs) / 2**20
    largest = sorted(
        ((_tree_size(path) / 2**20, str(path.relative_to(rootfs))) for path in _dirs(rootfs)),
        reverse=True,
    )[:8]
    print(f"image: {image.stat().st_size / 2**20:.1f} MB archive, {size_mb:.1f} MB unpacked")
    print("largest: " + ", ".join(f"{name} {mb:.1f} MB" for mb, name in largest))
    assert size_mb < MAX_UNCOMPRESSED_MB
    # Debian's packages, installed by dpkg: the project's own and the distribution's libraries.
    status = (rootfs / "var/lib/dpkg/status").read_text()
    for package in (
        "token-resource",
        "python3-grpcio",
        "python3-protobuf",
        "python3-watchdog",
        "python3-prometheus-client",
    ):
        assert f"Package: {package}\n" in status
    # No compiler, no package lists, no apt, no documentation.
    for absent in ("usr/bin/gcc", "usr/bin/cc", "usr/bin/apt-get", "usr/share/doc/python3"):
        assert not (rootfs / absent).exists(), absent
    lists = rootfs / "var/lib/apt/lists"
    indexes = [path.name for path in lists.iterdir() if path.is_file()] if lists.exists() else []
    assert indexes in ([], ["lock"]), indexes


def startup_probe_delay() -> int:
    daemon_set = yaml.safe_load((REPO / "deploy/kubernetes/base/agent/daemonset.yaml").read_text())
    (container,) = daemon_set["spec"]["template"]["spec"]["containers"]
    return int(container["startupProbe"]["initialDelaySeconds"])


def _dirs(rootfs: Path) -> list[Path]:
    return [
        path
        for top in ("usr/lib", "usr/share", "usr/bin", "var/lib")
        for path in (rootfs / top).iterdir()
        if path.is_dir() and not path.is_symlink()
    ]


def _tree_size(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_size
    return total


class Container:
    """One runc container of the image, with the agent's stderr in a file."""

    def __init__(self, name: str, bundle: Path) -> None:
        self.name = name
        self.bundle = bundle
        self.log_path = bundle / "stderr.log"

    def run(self) -> None:
        with self.log_path.open("wb") as log:
            subprocess.run(
                ["runc", "run", "--detach", "--bundle", str(self.bundle), self.name],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True,
                timeout=RUNC_TIMEOUT,
            )  # fmt: skip

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Like `kubectl exec`: a command in the running container."""
        return subprocess.run(
            ["runc", "exec", self.name, *argv],
            capture_output=True, text=True, timeout=RUNC_TIMEOUT, check=False,
        )  # fmt: skip

    def state(self) -> str:
        return str(self._state().get("status", "gone"))

    def pid(self) -> int:
        return int(self._state()["pid"])

    def _state(self) -> dict[str, Any]:
        result = subprocess.run(
            ["runc", "state", self.name], capture_output=True, text=True, check=False
        )
        state: dict[str, Any] = json.loads(result.stdout) if result.returncode == 0 else {}
        return state

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert time.monotonic() < deadline, f"never logged {text!r}:\n{self.log()}"
            time.sleep(0.05)

    def delete(self) -> None:
        subprocess.run(["runc", "delete", "--force", self.name], capture_output=True, check=False)


@pytest.fixture
def container(
    unpacked: tuple[dict[str, Any], Path],
    device_plugin_dir: Path,
    tmp_path: Path,
) -> Iterator[tuple[Container, ConfigMapVolume]]:
    image_config, rootfs = unpacked
    volume = ConfigMapVolume(tmp_path / "configmap")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    harness.run(["runc", "spec", "--bundle", str(bundle)], timeout=RUNC_TIMEOUT)
    spec = json.loads((bundle / "config.json").read_text())
    settings = image_config["config"]
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["process"].update(
        terminal=False,
        args=[*settings["Entrypoint"], *settings["Cmd"]],
        env=settings["Env"],
        cwd="/",
        noNewPrivileges=True,
        # Every capability dropped: as uid 0 the agent owns the kubelet's directory and needs
        # none to create, connect to and remove sockets there.
        capabilities={kind: [] for kind in ("bounding", "effective", "inheritable", "permitted")},
    )
    spec["mounts"] += [
        {"destination": "/var/lib/kubelet/device-plugins", "type": "bind",
         "source": str(device_plugin_dir), "options": ["rbind", "rw"]},
        {"destination": "/etc/token-resource", "type": "bind",
         "source": str(volume.directory), "options": ["rbind", "ro"]},
        {"destination": "/run/token-resource", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "noexec", "mode=0755", "size=1m"]},
    ]  # fmt: skip
    # The default spec's namespaces include a new, empty network namespace: no network.
    assert {"type": "network"} in spec["linux"]["namespaces"]
    (bundle / "config.json").write_text(json.dumps(spec))
    name = f"token-resource-test-{os.getpid()}-{time.monotonic_ns()}"
    runc = Container(name, bundle)
    try:
        yield runc, volume
    finally:
        runc.delete()
        print(f"container stderr:\n{runc.log()}")


def test_the_image_serves_the_kubelet_and_follows_a_configmap_update(
    container: tuple[Container, ConfigMapVolume],
    kubelet: KubeletStandin,
    device_plugin_dir: Path,
) -> None:
    runc, volume = container
    volume.write({"token-resource.toml": '[resources]\n"example.com/token" = 2\n'})
    started = time.monotonic()
    runc.run()
    # The DaemonSet's startup probe first tries `status` this long after the start: by then
    # it must answer, or the kubelet records a failed probe as a Warning event.
    control = Path(f"/proc/{runc.pid()}/root/run/token-resource/control.sock")
    while not control.is_socket():
        assert time.monotonic() - started < 60, f"no control socket:\n{runc.log()}"
        time.sleep(0.02)
    socket_after = time.monotonic() - started
    answered = runc.exec("token-resource", "status", "--timeout", "5")
    answered_after = time.monotonic() - started
    delay = startup_probe_delay()
    print(
        f"control socket {socket_after:.2f} s after `runc run`, `status` answered at "
        f"{answered_after:.2f} s; the startup probe's first try: {delay} s"
    )
    assert answered.returncode == 0, answered.stderr
    assert answered_after < delay
    kubelet.wait_for(serves_exactly({"example.com/token": 2}), timeout=60)

    # Confined as the DaemonSet asks: no capabilities, read-only root, no network.
    status = runc.exec("cat", "/proc/1/status").stdout
    assert "CapEff:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status
    assert runc.exec("touch", "/written").returncode != 0
    interfaces = runc.exec("cat", "/proc/net/dev").stdout.splitlines()[2:]
    assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]

    # A ConfigMap update (the ..data swap) is applied live, as a diff.
    volume.write({"token-resource.toml": '[resources]\n"example.com/token" = 5\n'})
    view = kubelet.wait_for(serves_exactly({"example.com/token": 5}), timeout=60)
    assert view.resources["example.com/token"].registrations == 1
    allocated = kubelet.allocate("example.com/token", ["token-4"])
    assert dict(allocated.container_responses[0].envs) == {
        "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN": "token-4"
    }

    # A bad update is refused; `kubectl exec ... token-resource reload` says why.
    volume.write({"token-resource.toml": '[resources]\n"example.com/token" = -1\n'})
    runc.wait_for_log("rejected, the previous configuration stays")
    reload = runc.exec("token-resource", "reload")
    assert reload.returncode == 1
    assert "count must be an integer between 0 and 100000, got -1" in reload.stderr
    status_line = runc.exec("token-resource", "status", "--timeout", "5")
    assert status_line.returncode == 0, status_line.stderr
    assert "example.com/token=5" in status_line.stdout
    assert "last reload rejected" in status_line.stdout
    assert kubelet.snapshot().counts() == {"example.com/token": 5}

    # SIGTERM (what the kubelet sends a stopping pod) ends it cleanly, sockets removed.
    harness.run(["runc", "kill", runc.name, "TERM"], timeout=RUNC_TIMEOUT)
    deadline = time.monotonic() + 30
    while runc.state() == "running":
        assert time.monotonic() < deadline, "the agent did not stop on SIGTERM"
        time.sleep(0.05)
    assert sorted(path.name for path in device_plugin_dir.iterdir()) == [
        "kubelet.sock",
        "kubelet_internal_checkpoint",
    ]
    log = runc.log()
    # Plain lines on stderr, one per event: no journal priorities, no notify complaints.
    assert "stopping: removing sockets" in log
    assert "Traceback" not in log
    assert "NOTIFY" not in log
    assert "<6>" not in log
    assert all(" INFO " in line or " ERROR " in line or " WARNING " in line
               for line in log.splitlines()), log  # fmt: skip
