"""The self-contained .rpm (token-resource-bundled, for EL9 without EPEL and Amazon Linux 2023).

Built once with `make -f packaging/bundled.mk bundled-rpm BUNDLED_PYTHON=3.9` into a temporary
directory (PyPI's wheels for CPython 3.9, x86_64), then inspected and installed with
`rpm --root`. It is never booted here: no RHEL or Amazon Linux host can be (the .deb of the
same staged tree runs on Debian 11 in tests/system/test_bundled_deb.py). A missing
rpm/rpmbuild/make/pip is a FAILURE, never a skip.

Environment:
  TOKEN_RESOURCE_BUNDLED_RPM  the .rpm under test (default: built now)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from token_resource._compat import tomllib

# The module's fixture builds the package (pip, rpmbuild): minutes under load.
pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
NAME = "token-resource-bundled"
PRIVATE = "/usr/lib/token-resource/site-packages"
PYTHON = "3.9"


def project_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as pyproject:
        version = tomllib.load(pyproject)["project"]["version"]
    assert isinstance(version, str)
    return version


def run(
    args: list[str], timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
        )
    except FileNotFoundError:
        pytest.fail(f"{args[0]} is not installed (see packaging/rpm/README.md)", pytrace=False)
    if check and done.returncode != 0:
        pytest.fail(
            f"{' '.join(args)} exited with {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}",
            pytrace=False,
        )
    return done


@dataclass(frozen=True)
class Package:
    path: Path
    scratch: Path

    def query(self, *args: str) -> str:
        return run(
            ["rpm", "--dbpath", str(self.scratch / "rpmdb"), "-qp", *args, str(self.path)]
        ).stdout


@pytest.fixture(scope="module")
def package() -> Iterator[Package]:
    for tool in ("rpm", "rpmbuild", "make"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (see packaging/rpm/README.md)", pytrace=False)
    scratch = Path(tempfile.mkdtemp(prefix="token-resource-bundled-rpmtest-"))
    try:
        given = os.environ.get("TOKEN_RESOURCE_BUNDLED_RPM")
        if given:
            path = Path(given).resolve()
        else:
            run(
                [
                    "make", "-s", "-C", str(REPO), "-f", "packaging/bundled.mk", "bundled-rpm",
                    f"BUNDLED_PYTHON={PYTHON}", f"BUNDLED_DIST={scratch / 'dist'}",
                    f"BUNDLED_BUILD={scratch / 'build'}", f"BUNDLED_PIP={sys.executable} -m pip",
                ],
                timeout=600,
            )  # fmt: skip
            path = scratch / "dist" / f"{NAME}-{project_version()}-1.x86_64.rpm"
        if not path.is_file():
            pytest.fail(f"{path} was not built", pytrace=False)
        yield Package(path, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_name_version_and_architecture(package: Package) -> None:
    fields = package.query("--qf", "%{NAME} %{VERSION} %{ARCH}").split()
    assert fields == [NAME, project_version(), "x86_64"]


def test_requires_only_python_abi_glibc_libstdcxx_and_systemd(package: Package) -> None:
    requires = {
        line.strip()
        for line in package.query("--requires").splitlines()
        if not line.startswith("rpmlib(")
    }
    assert requires == {
        f"python(abi) = {PYTHON}",
        "glibc >= 2.17",
        "libstdc++ >= 4.8",
        "systemd",
        "/bin/sh",
    }, requires
    # Nothing from the private directory leaks out as a Provides (sonames, python3dist()).
    provides = {line.split()[0] for line in package.query("--provides").splitlines()}
    assert provides == {NAME, f"{NAME}(x86-64)"}, provides
    assert package.query("--conflicts").split() == ["token-resource"]


def test_files_are_the_wheels_the_launcher_unit_config_and_man_pages(package: Package) -> None:
    files = set(package.query("-l").splitlines())
    for path in (
        "/usr/bin/token-resource",
        "/usr/lib/systemd/system/token-resource.service",
        "/etc/token-resource.toml",
        "/etc/token-resource.d",
        "/usr/share/man/man8/token-resource.8",
        "/usr/share/man/man5/token-resource.toml.5",
        f"{PRIVATE}/grpc/_cython/cygrpc.cpython-39-x86_64-linux-gnu.so",
        f"{PRIVATE}/google/_upb/_message.abi3.so",
        f"{PRIVATE}/watchdog/observers/inotify.py",
        f"{PRIVATE}/sdnotify/__init__.py",
        f"{PRIVATE}/tomli/__init__.py",
        f"{PRIVATE}/token_resource/protocol/deviceplugin_pb2.py",
        f"{PRIVATE}/token_resource-{project_version()}.dist-info/METADATA",
    ):
        assert path in files, path
    # Nothing outside the agent's own paths; no console scripts built for the build's Python.
    outside = sorted(
        f
        for f in files
        if not f.startswith(("/usr/lib/token-resource", "/usr/share/man/", "/etc/token-resource"))
        and f not in ("/usr/bin/token-resource", "/usr/lib/systemd/system/token-resource.service")
    )
    assert not outside, outside
    assert not [f for f in files if f.endswith(".pyc")]
    assert package.query("-c").split() == ["/etc/token-resource.toml"]


def test_scriptlets_compile_enable_and_clean_up(package: Package) -> None:
    scripts = package.query("--scripts")
    assert "compileall" in scripts, scripts
    assert PRIVATE in scripts, scripts
    assert re.search(
        r"(systemctl .*preset|systemd-update-helper).*token-resource\.service", scripts
    )
    assert not re.search(r"try-restart token-resource\.service|mark-restart", scripts), scripts
    assert "token-resource handover --else-restart" in scripts, scripts
    assert "rm -rf /usr/lib/token-resource" in scripts, scripts


def test_rpm_root_install_and_the_launcher_refuses_another_python(package: Package) -> None:
    root = package.scratch / "root"
    run(
        [
            "rpm", "--dbpath", str(package.scratch / "rootdb"), "--root", str(root), "-i",
            "--nodeps", "--noscripts", str(package.path),
        ],
        timeout=120,
    )  # fmt: skip
    launcher = root / "usr/bin/token-resource"
    assert launcher.read_text().startswith("#!/usr/bin/python3 -IS\n")
    assert (root / "usr/lib/systemd/system/token-resource.service").read_bytes() == (
        REPO / "systemd/token-resource.service"
    ).read_bytes()
    assert (root / PRIVATE.lstrip("/") / "grpc/_cython").is_dir()
    # Under another Python (the host's: Debian 12's 3.11) it says so instead of failing on
    # an import.
    host = run(["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2], sep='.')"])
    assert host.stdout.strip() != PYTHON, "this check needs a host python3 other than 3.9"
    other = run(["/usr/bin/python3", "-I", "-S", str(launcher), "--version"], check=False)
    assert other.returncode == 1, other
    assert f"built for Python {PYTHON}" in other.stderr, other.stderr
