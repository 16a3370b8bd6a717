"""A real containerd's CRI, driven as the kubelet drives it to start a container with CDI devices.

Debian 13's containerd (1.7.24, built against Debian's container-device-interface 0.8.0) runs
as a process of the test's on the host, with its CRI plugin, `enable_cdi = true` and the CDI
directory the test names; runc is the host's. The kubelet's side is a small CRI client over
the messages it needs (field numbers from Kubernetes' cri-api `runtime/v1/api.proto`; enums
are varints, declared as int32): a host-network pod sandbox, then one-shot containers created
with `CDI_devices`, as a 1.36 kubelet passes a prepared claim's CDI IDs, whose output is read
from their CRI log files. Everything it starts, mounts and writes is gone at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tests.system import harness
from tests.system.node import wait_for
from tests.system.test_image_import import mounts_under
from token_resource.protocol.descriptor import INT32, REPEATED, STRING, ProtoFile

NAMESPACE = "k8s.io"
NODE = 2  # NamespaceMode.NODE: the host's network, as a hostNetwork pod
EXITED = 2  # ContainerState.CONTAINER_EXITED
TIMEOUT = 60.0
# The directory that containerd 1.7 puts its shims' sockets in, whatever its config says.
SHIM_SOCKETS = Path("/run/containerd/s")

_CRI = ProtoFile(
    "token_resource_tests/cri.proto",
    "runtime.v1",
    {
        "VersionRequest": [(1, "version", STRING, None)],
        "VersionResponse": [
            (1, "version", STRING, None),
            (2, "runtime_name", STRING, None),
            (3, "runtime_version", STRING, None),
            (4, "runtime_api_version", STRING, None),
        ],
        "NamespaceOption": [
            (1, "network", INT32, None),
            (2, "pid", INT32, None),
            (3, "ipc", INT32, None),
        ],
        "LinuxSandboxSecurityContext": [(1, "namespace_options", "NamespaceOption", None)],
        "LinuxPodSandboxConfig": [
            (1, "cgroup_parent", STRING, None),
            (2, "security_context", "LinuxSandboxSecurityContext", None),
        ],
        "PodSandboxMetadata": [
            (1, "name", STRING, None),
            (2, "uid", STRING, None),
            (3, "namespace", STRING, None),
            (4, "attempt", INT32, None),
        ],
        "PodSandboxConfig": [
            (1, "metadata", "PodSandboxMetadata", None),
            (3, "log_directory", STRING, None),
            (8, "linux", "LinuxPodSandboxConfig", None),
        ],
        "RunPodSandboxRequest": [(1, "config", "PodSandboxConfig", None)],
        "RunPodSandboxResponse": [(1, "pod_sandbox_id", STRING, None)],
        "PodSandboxIdRequest": [(1, "pod_sandbox_id", STRING, None)],  # Stop- and Remove-
        "Empty": [],
        "ImageSpec": [(1, "image", STRING, None)],
        "ContainerMetadata": [(1, "name", STRING, None), (2, "attempt", INT32, None)],
        "CDIDevice": [(1, "name", STRING, None)],
        "ContainerConfig": [
            (1, "metadata", "ContainerMetadata", None),
            (2, "image", "ImageSpec", None),
            (3, "command", STRING, REPEATED),
            (11, "log_path", STRING, None),
            (17, "CDI_devices", "CDIDevice", REPEATED),
        ],
        "CreateContainerRequest": [
            (1, "pod_sandbox_id", STRING, None),
            (2, "config", "ContainerConfig", None),
            (3, "sandbox_config", "PodSandboxConfig", None),
        ],
        "CreateContainerResponse": [(1, "container_id", STRING, None)],
        "ContainerIdRequest": [(1, "container_id", STRING, None)],  # Start-, Remove-, Status
        "ContainerStatus": [
            (1, "id", STRING, None),
            (3, "state", INT32, None),
            (7, "exit_code", INT32, None),
            (10, "reason", STRING, None),
            (11, "message", STRING, None),
        ],
        "ContainerStatusResponse": [(1, "status", "ContainerStatus", None)],
    },
    {},
)
_MESSAGES: dict[str, Any] = _CRI.message_classes()


def message(type_name: str, /, **fields: Any) -> Any:
    return _MESSAGES[type_name](**fields)


@dataclass(frozen=True)
class Containerd:
    """Where Debian 13's containerd and ctr are, unpacked from the package."""

    bin_dir: Path

    @property
    def version(self) -> str:
        result = harness.run([str(self.bin_dir / "containerd"), "--version"], timeout=30)
        return result.stdout.strip()


def unpack_containerd(rootfs: Path, into: Path) -> Containerd:
    """containerd from the .deb in a Debian rootfs's apt cache (harness.DOWNLOAD_ONLY_BY_SUITE)."""
    debs = sorted((rootfs / "var/cache/apt/archives").glob("containerd_*.deb"))
    if not debs:
        raise harness.HarnessError(f"no containerd .deb in {rootfs}'s apt cache")
    harness.run(["dpkg-deb", "-x", str(debs[-1]), str(into)], timeout=120)
    return Containerd(into / "usr/bin")


class CriRuntime:
    """A running containerd with CRI and CDI, one host-network pod sandbox in it."""

    def __init__(self, directory: Path, cdi_dirs: Sequence[Path], sandbox_image: str) -> None:
        self.directory = directory
        self.address = directory / "containerd.sock"
        self.logs = directory / "logs"
        self.cdi_dirs = tuple(cdi_dirs)
        self.sandbox_image = sandbox_image
        self.sandbox_id = ""
        self._sandbox: Any = None
        self._channel: grpc.Channel | None = None
        self._count = 0

    def call(self, method: str, request: Any, response: str) -> Any:
        assert self._channel is not None
        service = "ImageService" if "Image" in method else "RuntimeService"
        rpc = self._channel.unary_unary(
            f"/runtime.v1.{service}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=_MESSAGES[response].FromString,
        )
        return rpc(request, timeout=TIMEOUT)

    def version(self) -> Any:
        return self.call("Version", message("VersionRequest", version="v1"), "VersionResponse")

    def run_pod_sandbox(self) -> None:
        self._sandbox = message(
            "PodSandboxConfig",
            metadata=message(
                "PodSandboxMetadata", name="cdi", uid=str(uuid.uuid4()), namespace="default"
            ),
            log_directory=str(self.logs),
            linux=message(
                "LinuxPodSandboxConfig",
                security_context=message(
                    "LinuxSandboxSecurityContext",
                    namespace_options=message("NamespaceOption", network=NODE),
                ),
            ),
        )
        request = message("RunPodSandboxRequest", config=self._sandbox)
        self.sandbox_id = self.call(
            "RunPodSandbox", request, "RunPodSandboxResponse"
        ).pod_sandbox_id

    def run(self, image: str, command: Sequence[str], cdi_devices: Sequence[str]) -> str:
        """Create, start and wait for a container; its output. grpc.RpcError if CreateContainer
        fails (the kubelet's CreateContainerError), with containerd's reason in details()."""
        self._count += 1
        log_path = f"c{self._count}.log"
        config = message(
            "ContainerConfig",
            metadata=message("ContainerMetadata", name=f"c{self._count}"),
            image=message("ImageSpec", image=image),
            command=list(command),
            log_path=log_path,
            CDI_devices=[message("CDIDevice", name=name) for name in cdi_devices],
        )
        request = message(
            "CreateContainerRequest",
            pod_sandbox_id=self.sandbox_id,
            config=config,
            sandbox_config=self._sandbox,
        )
        container = self.call("CreateContainer", request, "CreateContainerResponse").container_id
        by_id = message("ContainerIdRequest", container_id=container)
        try:
            self.call("StartContainer", by_id, "Empty")
            status = wait_for(
                lambda: _exited(self.call("ContainerStatus", by_id, "ContainerStatusResponse")),
                TIMEOUT,
                f"container {container} to exit",
            )
            assert status.exit_code == 0, status
            return _log_content((self.logs / log_path).read_text())
        finally:
            self.call("RemoveContainer", by_id, "Empty")


def _exited(response: Any) -> Any:
    status = response.status
    return status if status.state == EXITED else None


def _log_content(text: str) -> str:
    """The output in a CRI log file: ``<time> <stream> <tag> <content>`` lines, where tag P is
    part of a line and F ends one."""
    output = []
    for line in text.splitlines():
        _, _, tag, content = line.split(" ", 3)
        output.append(content + ("\n" if tag == "F" else ""))
    return "".join(output)


def ctr(containerd: Containerd, address: Path, *argv: str) -> str:
    result = harness.run(
        [
            str(containerd.bin_dir / "ctr"),
            "--address",
            str(address),
            "--namespace",
            NAMESPACE,
            *argv,
        ],
        timeout=TIMEOUT,
    )
    return result.stdout


@contextlib.contextmanager
def cri_runtime(
    containerd: Containerd, cdi_dirs: Sequence[Path], images: Sequence[Path], sandbox_image: str
) -> Iterator[CriRuntime]:
    """containerd with CRI and CDI, ``images`` imported, a pod sandbox running."""
    directory = Path(tempfile.mkdtemp(prefix="tr-cri-"))
    runtime = CriRuntime(directory, cdi_dirs, sandbox_image)
    runtime.logs.mkdir()
    config = directory / "config.toml"
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    spec_dirs = ", ".join(f'"{path}"' for path in cdi_dirs)
    config.write_text(
        "version = 2\n"
        f'root = "{directory / "root"}"\n'
        f'state = "{directory / "state"}"\n'
        # No "opt" plugin: it would create /opt/containerd on the host.
        'disabled_plugins = ["io.containerd.internal.v1.opt"]\n'
        f'[grpc]\n  address = "{runtime.address}"\n'
        f"{cri}]\n"
        "  enable_cdi = true\n"
        f"  cdi_spec_dirs = [{spec_dirs}]\n"
        f'  sandbox_image = "{sandbox_image}"\n'
        # runc may not lower a process's oom_score_adj on this machine (Permission denied).
        "  restrict_oom_score_adj = true\n"
        f'{cri}.cni]\n  bin_dir = "{directory / "cni"}"\n  conf_dir = "{directory / "cni"}"\n'
        f'{cri}.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
        f'{cri}.containerd.runtimes.runc.options]\n  Root = "{directory / "runc"}"\n'
    )
    log = directory / "containerd.log"
    had_run_dir = SHIM_SOCKETS.parent.exists()
    # Its own shim first on the PATH (the host may have another containerd's), then the host's runc.
    env = {**os.environ, "PATH": f"{containerd.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    left_mounted: list[str] = []
    try:
        with log.open("wb") as output:
            process = subprocess.Popen(
                [str(containerd.bin_dir / "containerd"), "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            wait_for(
                lambda: process.poll() is not None or runtime.address.exists(),
                TIMEOUT,
                "containerd's socket",
            )
            assert process.poll() is None, f"containerd exited:\n{log.read_text()}"
            runtime._channel = grpc.insecure_channel(f"unix:{runtime.address}")
            for image in images:
                ctr(containerd, runtime.address, "images", "import", str(image))
            runtime.run_pod_sandbox()
            yield runtime
        finally:
            _stop(runtime, process)
            print(f"--- containerd log\n{log.read_text()[-6000:]}")
            left_mounted = mounts_under(directory)
            for mount_point in left_mounted:
                harness.run(["umount", "--lazy", mount_point], timeout=60)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        if not had_run_dir:
            for empty in (SHIM_SOCKETS, SHIM_SOCKETS.parent):
                with contextlib.suppress(OSError):
                    empty.rmdir()
    assert not left_mounted, f"containerd left mounts behind: {left_mounted}"


def _stop(runtime: CriRuntime, process: subprocess.Popen[bytes]) -> None:
    """The sandbox stopped and removed (its shim exits), then containerd; a shim still
    serving this containerd is killed."""
    if runtime._channel is not None:
        if runtime.sandbox_id:
            request = message("PodSandboxIdRequest", pod_sandbox_id=runtime.sandbox_id)
            with contextlib.suppress(grpc.RpcError):
                runtime.call("StopPodSandbox", request, "Empty")
                runtime.call("RemovePodSandbox", request, "Empty")
        runtime._channel.close()
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
    for pid in _shims_of(runtime.address):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _shims_of(runtime.address) and time.monotonic() < deadline:
        time.sleep(0.05)


def _shims_of(address: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"-address" in argv and str(address).encode() in argv:
                    pids.append(int(entry.name))
    return pids
