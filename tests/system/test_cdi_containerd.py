"""The CDI specs the agent writes, read by a real container runtime: Debian 13's containerd.

A real 1.36 node with containerd 2.3 showed that a spec the runtime's CDI library refuses fails
the container (`CreateContainerError ... unresolvable CDI devices`), and that the library
refuses a spec declaring `cdiVersion: "0.3.0"` whose device name begins with a digit, as
every device named after a claim UID beginning with 0-9 did. Here the agent prepares claims
against the kubelet and API-server stand-ins, and each claim's CDI IDs are handed to
containerd's CRI as the kubelet hands them (`CDI_devices`), in a container that prints its
environment. The runtime must refuse the old form first, or the test would prove nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.dra import conftest as dra_fixtures
from tests.dra.node import (
    DRIVER,
    ENV,
    TIMEOUT,
    allocate,
    claim_id,
    dra_resource,
    pool_of,
    registered,
    start_driver,
)
from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin
from tests.standin.kubelet import KubeletStandin
from tests.system.cri import Containerd, CriRuntime, cri_runtime, unpack_containerd

# The DRA tests' fixtures (tests/dra/conftest.py): the node's directories, both stand-ins, the
# agent.
dirs, apiserver, kubelet, dra_agent = (
    dra_fixtures.dirs,
    dra_fixtures.apiserver,
    dra_fixtures.kubelet,
    dra_fixtures.dra_agent,
)

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/token-resource-cdi-test:1"
ENV_COMMAND = ("/bin/busybox", "env")
REFUSED = "unresolvable CDI devices"


@pytest.fixture(scope="module")
def containerd(unpacked_rootfs: Callable[[str], Path], session_dir: Path) -> Containerd:
    target = session_dir / "containerd-trixie"
    if not target.exists():
        unpack_containerd(unpacked_rootfs("trixie"), target)
    return Containerd(target / "usr/bin")


@pytest.fixture(scope="module")
def image(session_dir: Path) -> Path:
    """A tiny image: the host's busybox and the libraries it loads, sleeping by default (it is
    also the pod sandbox's image)."""
    root = session_dir / "cdi-image-root"
    shutil.rmtree(root, ignore_errors=True)
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    (root / "bin").mkdir(parents=True)
    shutil.copy(busybox, root / "bin/busybox")
    libraries = subprocess.run(
        ["ldd", str(busybox)], capture_output=True, text=True, check=True
    ).stdout
    for library in re.findall(r"(/\S+\.so[.\d]*)", libraries):
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(library, target)
    layer = session_dir / "cdi-image.tar"
    subprocess.run(
        [
            "tar",
            "-C",
            str(root),
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "-cf",
            str(layer),
            ".",
        ],
        check=True,
    )
    containerfile = session_dir / "cdi-image.Containerfile"
    containerfile.write_text('CMD ["/bin/busybox", "sleep", "3600"]\n')
    archive = session_dir / "cdi-image.oci.tar"
    name, version = IMAGE.rsplit(":", 1)
    subprocess.run(
        [
            "python3",
            str(REPO / "packaging/image/oci.py"),
            str(layer),
            str(containerfile),
            version,
            str(archive),
            name,
        ],
        check=True,
    )
    return archive


@pytest.fixture
def cri(containerd: Containerd, image: Path, dirs: dict[str, Path]) -> Iterator[CriRuntime]:
    print(containerd.version)
    with cri_runtime(containerd, [dirs["cdi"]], [image], IMAGE) as runtime:
        yield runtime


def environment(cri: CriRuntime, cdi_ids: list[str]) -> dict[str, str]:
    output = cri.run(IMAGE, ENV_COMMAND, cdi_ids)
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def refusal(cri: CriRuntime, cdi_ids: list[str]) -> str:
    """CreateContainer's error for a container with ``cdi_ids``, which must fail."""
    with pytest.raises(grpc.RpcError) as failure:
        cri.run(IMAGE, ENV_COMMAND, cdi_ids)
    details: str = failure.value.details() or ""
    return details


def test_the_runtime_enforces_the_cdi_version_rules(cri: CriRuntime, dirs: dict[str, Path]) -> None:
    """What earlier builds (up to 68301fc) wrote for a claim whose UID begins with a digit is
    refused; the same spec declaring 0.5.0 is read."""
    name = f"0{uuid.uuid4().hex[:7]}-0"  # as a claim UID beginning with a digit makes it
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "probe.example.com/claim",
        "devices": [{"name": name, "containerEdits": {"env": ["PROBE=1"]}}],
    }
    path = dirs["cdi"] / "probe.json"
    path.write_text(json.dumps(spec))
    cdi_id = f"probe.example.com/claim={name}"
    assert REFUSED in refusal(cri, [cdi_id])
    path.write_text(json.dumps({**spec, "cdiVersion": "0.5.0"}))
    assert environment(cri, [cdi_id])["PROBE"] == "1"


def test_each_claims_container_sees_its_token_whatever_its_uid_begins_with(
    cri: CriRuntime,
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, dra_resource(16))
    apiserver.wait_for(pool_of(16), timeout=TIMEOUT)
    for index, first in enumerate("0123456789abcdef"):
        uid = first + str(uuid.uuid4())[1:]
        namespace, uid, name = claim_id(
            allocate(apiserver, f"pod-{first}", f"token-{index}", uid=uid)
        )
        result = kubelet.prepare(DRIVER, [(namespace, uid, name)])
        assert result.error is None, result
        [(_, _, _, cdi_ids)] = result.claims[uid].devices
        assert environment(cri, list(cdi_ids))[ENV] == f"token-{index}", uid


def test_an_upgraded_agent_repairs_the_specs_of_claims_already_prepared(
    cri: CriRuntime,
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    """A pod in CreateContainerError after an earlier build prepared its claim starts once
    the new agent has started: the kubelet retries the container with the CDI IDs it has."""
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, dra_resource(2))
    apiserver.wait_for(pool_of(2), timeout=TIMEOUT)
    cdi_ids = {}
    for index, first in enumerate("4d"):
        namespace, uid, name = claim_id(
            allocate(apiserver, f"pod-{first}", f"token-{index}", uid=first + str(uuid.uuid4())[1:])
        )
        [(_, _, _, ids)] = kubelet.prepare(DRIVER, [(namespace, uid, name)]).claims[uid].devices
        cdi_ids[first] = list(ids)
    assert dra_agent.stop() == 0
    for spec_file in dirs["cdi"].glob("*.json"):
        old = {**json.loads(spec_file.read_text()), "cdiVersion": "0.3.0"}
        spec_file.write_text(json.dumps(old))
    assert REFUSED in refusal(cri, cdi_ids["4"])
    assert environment(cri, cdi_ids["d"])[ENV] == "token-1"
    dra_agent.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    assert environment(cri, cdi_ids["4"])[ENV] == "token-0"
    assert environment(cri, cdi_ids["d"])[ENV] == "token-1"
