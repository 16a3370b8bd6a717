"""Where `make kube-programs` put the real components' programs (tests/kube/kube.mk)."""

from __future__ import annotations

import os
from pathlib import Path

# The releases whose kubelet parts are built; the control plane is built for the newest.
RELEASES = ("1.36", "1.37")
CONTROL_PLANE_RELEASE = "1.37"


class MissingProgram(AssertionError):
    """A program that was not built: the run fails, it never skips."""


def program(release: str, name: str) -> Path:
    """The built program ``name`` of Kubernetes ``release``."""
    return built(f"v{release}", name)


def helm() -> Path:
    """helm, built from its own module (tests/kube/go/helm)."""
    return built("helm", "helm")


def crd(name: str) -> Path:
    """A CustomResourceDefinition's file from another project's module (tests/kube/go/crds)."""
    path = kube_bin() / "crds" / name
    if not path.is_file():
        raise MissingProgram(f"{path} was not copied (make kube-programs)")
    return path


def kube_bin() -> Path:
    base = os.environ.get("TOKEN_RESOURCE_KUBE_BIN")
    if not base:
        raise MissingProgram(
            "TOKEN_RESOURCE_KUBE_BIN is not set: run these tests with `make kube-test`, "
            "which builds the real components first"
        )
    return Path(base)


def built(directory: str, name: str) -> Path:
    path = kube_bin() / directory / name
    if not os.access(path, os.X_OK):
        raise MissingProgram(f"{path} was not built (make kube-programs)")
    return path
