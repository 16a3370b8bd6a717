"""The fleet's simulated nodes (bench/scale.py): kwok (``sigs.k8s.io/kwok``, built by ``make
kwok``) keeping them alive as kubelets would, and the objects each one has."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.kube.controlplane import ControlPlane
from tests.kube.programs import built

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@contextmanager
def kwok(cp: ControlPlane, directory: Path) -> Iterator[subprocess.Popen[bytes]]:
    """kwok managing the Nodes annotated ``kwok.x-k8s.io/node: fake``, as user ``kwok``."""
    kubeconfig = cp.write_kubeconfig(
        directory / "kwok.conf", identity=cp.ca.client_certificate("kwok", ("system:masters",))
    )
    log = (directory / "kwok.log").open("ab")
    process = subprocess.Popen(
        [
            str(built("kwok", "kwok")),
            *(f"--config={stage}" for stage in sorted(built("kwok", "stages").glob("*.yaml"))),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            "--cidr=10.0.0.1/16",
            "--node-ip=10.0.0.1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(20)
        log.close()


def new_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
    }


def node_slice(node: str, driver: str) -> dict[str, Any]:
    """The slice a node's agent publishes for two tokens (apiserver/objects/slices.py's shape)."""
    devices = [{"name": f"token-{i}"} for i in range(2)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": f"{node}-token", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
