"""docs/helm.md: every helm command line in its code blocks runs with the
real helm (installs and upgrades as a server-side dry run against the real API server, OCI
commands up to the registry, which is not there), and its table names every value."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from tests.kube.chart import CHART, EXAMPLES, ROOT, Helm
from tests.kube.controlplane import ControlPlane
from tests.kube.test_chart import VERSION

DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "helm.md"]
# A registry address nobody listens on: the OCI commands get as far as connecting.
REGISTRY = "127.0.0.1:1"
RELEASE = "tr-docs"


def helm_commands() -> list[str]:
    found = []
    for document in DOCUMENTS:
        in_code = False
        for line in document.read_text().splitlines():
            if line.lstrip().startswith("```"):
                in_code = not in_code
            elif in_code and line.startswith("helm "):
                found.append(line)
    return found


def concrete(line: str, package: Path, kubeconfig: Path) -> list[str]:
    """The documented line with its placeholders filled in, in a namespace and under release
    names of the test's own (the overlays' objects may be there); a change of the cluster's
    state made a server-side dry run, a registry one nobody listens on."""
    line = line.replace("./dist/token-resource-<version>.tgz", str(package))
    line = line.replace("dist/token-resource-<version>.tgz", str(package))
    line = line.replace("<version>", VERSION).replace("registry.example.com", REGISTRY)
    line = line.replace("my-values.yaml", "deploy/helm/examples/example.yaml")
    line = line.replace("deploy/helm/examples/", f"{EXAMPLES}/")
    # A new release for an install (the test's own is there already), it for an upgrade.
    line = re.sub(r"install token-resource", f"install {RELEASE}-new", line)
    line = re.sub(r"upgrade token-resource", f"upgrade {RELEASE}", line)
    line = line.replace("-n token-resource", f"-n {RELEASE}")
    args = shlex.split(line)[1:]
    if args[0] in ("install", "upgrade"):
        args += ["--dry-run=server", "--kubeconfig", str(kubeconfig)]
    if REGISTRY in line:
        args += ["--plain-http"]
    return args


def test_every_documented_helm_command_runs(
    control_plane: ControlPlane, helm: Helm, tmp_path: Path
) -> None:
    commands = helm_commands()
    assert len(commands) == 5, commands
    helm.output("package", str(CHART), "--destination", str(tmp_path))
    package = tmp_path / f"token-resource-{VERSION}.tgz"
    kubeconfig = control_plane.admin_kubeconfig(tmp_path / "admin.kubeconfig")
    # `helm upgrade` needs the release: installed for real, on no node (a DaemonSet's pods
    # would go to the other tests' nodes), and uninstalled at the end.
    helm.output(
        "install",
        RELEASE,
        str(package),
        "-n",
        RELEASE,
        "--create-namespace",
        "--set",
        f"nodeSelector.{RELEASE}=nowhere",
        "--kubeconfig",
        str(kubeconfig),
        "--wait=false",
    )
    try:
        for line in commands:
            done = helm.run(*concrete(line, package, kubeconfig))
            if "registry.example.com" in line:
                assert done.returncode == 1, (line, done.stdout)
                assert "connection refused" in done.stderr, (line, done.stderr)
            else:
                assert done.returncode == 0, (line, done.stderr)
                assert "NOTES:" in done.stdout, (line, done.stdout)
    finally:
        helm.output("uninstall", RELEASE, "-n", RELEASE, "--kubeconfig", str(kubeconfig))


def paths(values: Any, prefix: str = "") -> list[str]:
    """Every key path of the values, inner ones too (``image``, ``image.tag``)."""
    found = []
    for name, value in values.items():
        path = f"{prefix}{name}"
        found.append(path)
        if isinstance(value, dict):
            found += paths(value, f"{path}.")
    return found


def test_the_table_names_every_value() -> None:
    """Each value is in the table, itself or by a part that holds it (``resources`` for
    ``resources.requests.cpu``), and the table names no value the chart lacks."""
    text = (ROOT / "docs" / "helm.md").read_text()
    table = text[text.index("| Value | Default | What it sets |") :].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]
    documented = {name for row in rows for name in re.findall(r"`([\w.]+)`", row.split("|")[1])}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    every = paths(values)
    assert documented <= set(every), documented - set(every)
    leaves = [path for path in every if not any(other.startswith(f"{path}.") for other in every)]
    missing = [
        path
        for path in leaves
        if not any(path == name or path.startswith(f"{name}.") for name in documented)
    ]
    assert not missing, missing
