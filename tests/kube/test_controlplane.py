"""The agent against a real 1.37 control plane: etcd, kube-apiserver (Node,RBAC,
NodeRestriction), kube-scheduler and kube-controller-manager (tests/kube/controlplane.py)."""

from __future__ import annotations

import base64
import json

from tests.kube.controlplane import ControlPlane


def test_identities(control_plane: ControlPlane) -> None:
    """The node identity reads its own Node; a bound service-account token names its node."""
    control_plane.add_node("cp-identities")
    node = control_plane.node_client("cp-identities")
    assert node.get("/api/v1/nodes/cp-identities")["status"]["allocatable"]["pods"] == "110"
    token = control_plane.service_account_token("kube-system", "cp-identities", "cp-identities")
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["kubernetes.io"]["node"]["name"] == "cp-identities"
    status, _ = control_plane.client(token=token).request("GET", "/api/v1/nodes")
    assert status == 403
