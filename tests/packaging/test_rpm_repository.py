"""The signed dnf repository (``make repo``: packaging/repo/publish, rpm/el9) read by a real dnf.

No RHEL host can boot here, so Debian's dnf (4.14, librepo and libsolv as on EL9) works in an
installation root: docs/install.md's .repo file as written (``file:`` for ``https:``) beside a
stand-in of EL9's own repositories, one package providing what EL9 and EPEL 9 provide
(tests/packaging/distributions.py). The package is installed by name with its signature and the
metadata's checked, a newer build is taken by ``dnf upgrade``, and a repository signed by
another key is refused. Scriptlets are not run (the root has no shell or systemd): the
packages' scriptlets are tested in tests/packaging/test_rpm.py.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.documented import example, replaced
from tests.packaging.distributions import DISTRIBUTIONS
from tests.packaging.test_rpm import NAME, REPO, project_version, run
from tests.repositories import Repository

# Two builds of the package (rpmbuild) and a stand-in: a minute under load.
pytestmark = pytest.mark.timeout(600)

DOCUMENTED_URL = "https://packages.example.com/token-resource"
DOCUMENTED_KEY = "/etc/pki/rpm-gpg/RPM-GPG-KEY-token-resource"
TOOLS = ("rpm", "rpmbuild", "rpmsign", "createrepo_c", "dnf", "gpg", "make", "git")


@dataclass(frozen=True)
class Builds:
    first: Path  # release 1
    newer: Path  # release 2, the same version
    standin: Path  # the stand-in of EL9's repositories' packages
    scratch: Path


def standin_spec(scratch: Path) -> Path:
    """One empty package that provides what EL9 (with EPEL 9) provides the agent."""
    provides = [
        f"Provides: {name}" + (f" = {version}" if version else "")
        for name, version in sorted(DISTRIBUTIONS["el9"].provides().items())
    ]
    spec = scratch / "el9-standin.spec"
    spec.write_text(
        "\n".join(
            [
                "Name: el9-standin",
                "Version: 9",
                "Release: 1",
                "Summary: what EL9 and EPEL 9 provide token-resource (a test's stand-in)",
                "License: MIT",
                "BuildArch: noarch",
                *provides,
                "%description",
                "A stand-in of EL9's repositories for tests/packaging/test_rpm_repository.py.",
                "%files",
                "",
            ]
        )
    )
    return spec


@pytest.fixture(scope="module")
def builds() -> Iterator[Builds]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed (see packaging/rpm/README.md)")
    scratch = Path(tempfile.mkdtemp(prefix="token-resource-rpm-repository-"))
    try:
        rpms = {}
        for release in ("1", "2"):
            dist = scratch / f"dist-{release}"
            run(
                [
                    "make", "-s", "-C", str(REPO), "-f", "packaging/rpm.mk", "rpm",
                    "RPM_TARGET=el9", f"RPM_RELEASE={release}", f"RPM_DIST={dist}",
                    f"RPM_TOPDIR={scratch / 'rpmbuild'}",
                ],
                timeout=300,
            )  # fmt: skip
            rpms[release] = dist / f"{NAME}-{project_version()}-{release}.noarch.rpm"
        topdir = scratch / "standin-build"
        run(
            [
                "rpmbuild", "-bb", "--quiet", "--define", f"_topdir {topdir}",
                "--dbpath", str(scratch / "rpmdb"), str(standin_spec(scratch)),
            ],
            timeout=120,
        )  # fmt: skip
        (standin,) = (topdir / "RPMS/noarch").glob("el9-standin-*.rpm")
        yield Builds(rpms["1"], rpms["2"], standin, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Host:
    """An installation root that dnf installs into, as a node's / would be."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repos = root / "etc/yum.repos.d"
        self.repos.mkdir(parents=True)
        # dnf's own settings only: never the machine's /etc/dnf/dnf.conf.
        self.config = root / "etc/dnf/dnf.conf"
        self.config.parent.mkdir()
        self.config.write_text("[main]\n")

    def dnf_command(self, *args: str) -> list[str]:
        return [
            "dnf", "--assumeyes", f"--installroot={self.root}", "--releasever=9",
            f"--config={self.config}", f"--setopt=reposdir={self.repos}",
            f"--setopt=cachedir={self.root / 'var/cache/dnf'}", "--setopt=tsflags=noscripts",
            "--disableplugin=*", *args,
        ]  # fmt: skip

    def dnf(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.dnf_command(*args), capture_output=True, text=True, timeout=300, check=False
        )
        if check:
            assert done.returncode == 0, f"dnf {args}: {done.stdout}\n{done.stderr}"
        return done

    def installed(self, package: str) -> str:
        query = ("repoquery", "--installed", "--queryformat", "%{version}-%{release}")
        return self.dnf(*query, package).stdout.strip()


@pytest.fixture
def host(builds: Builds, tmp_path: Path) -> Host:
    """A root with the documented .repo file for the repository at ``tmp_path/main`` and the
    stand-in of EL9's repositories (unsigned: it stands for the distribution's own)."""
    host = Host(tmp_path / "root")
    standin = tmp_path / "el9-standin"
    standin.mkdir()
    shutil.copy(builds.standin, standin)
    run(["createrepo_c", "--quiet", str(standin)])
    (host.repos / "el9-standin.repo").write_text(
        f"[el9-standin]\nname=EL9 (stand-in)\nbaseurl=file://{standin}\ngpgcheck=0\n"
    )
    repo_file = example("install.md", "ini", "[token-resource]")
    repo_file = replaced(repo_file, DOCUMENTED_URL, f"file://{tmp_path / 'main'}")
    repo_file = replaced(repo_file, f"file://{DOCUMENTED_KEY}", f"file://{tmp_path / 'key.asc'}")
    (host.repos / "token-resource.repo").write_text(repo_file)
    return host


def test_the_documented_commands_install_the_package_by_name_signed(
    builds: Builds, host: Host, tmp_path: Path
) -> None:
    """docs/install.md's commands, run where the key was copied (the repository's directory):
    the key to where the .repo file says, the package by name; enabling the unit is left out
    (no systemd in the root: tests/system boots the .deb's)."""
    repository = Repository(tmp_path, "main")
    repository.publish("el9", builds.first)
    script = example("install.md", "sh", DOCUMENTED_KEY)
    script = replaced(script, DOCUMENTED_KEY, str(tmp_path / "key.asc"))
    script = replaced(script, f"dnf install {NAME} ", " ".join(host.dnf_command("install", NAME)))
    script = replaced(script, f"systemctl enable --now {NAME}\n", "")
    installed = run(["sh", "-euc", f"cd {repository.out}\n{script}"], timeout=300)
    assert host.installed(NAME) == f"{project_version()}-1", installed
    # gpgcheck: the package's signature is the key's; repo_gpgcheck: so is the metadata's.
    signed = run(["rpm", "--root", str(host.root), "-q", "--qf", "%{RSAHEADER:pgpsig}", NAME])
    fingerprint = run(
        ["gpg", "--homedir", str(repository.gnupg), "--with-colons", "--list-keys"]
    ).split("fpr:::::::::")[1].split(":")[0]  # fmt: skip
    assert fingerprint[-16:].lower() in signed.lower(), signed
    assert (repository.out / "rpm/el9/repodata/repomd.xml.asc").is_file()
    site = host.root / f"usr/lib/python{DISTRIBUTIONS['el9'].python}/site-packages"
    assert (site / "token_resource/cli/__init__.py").is_file()


def test_dnf_upgrade_takes_a_newer_build(builds: Builds, host: Host, tmp_path: Path) -> None:
    repository = Repository(tmp_path, "main")
    repository.publish("el9", builds.first)
    shutil.copy(repository.armored_key, tmp_path / "key.asc")
    host.dnf("install", NAME)
    repository.publish("el9", builds.newer)
    upgraded = host.dnf("--refresh", "upgrade")
    assert host.installed(NAME) == f"{project_version()}-2", upgraded.stdout
    # Both builds stay published, for `dnf downgrade`.
    assert len(list((repository.out / "rpm/el9").glob(f"{NAME}-*.rpm"))) == 2


def test_a_repository_signed_by_another_key_is_refused(
    builds: Builds, host: Host, tmp_path: Path
) -> None:
    """The node trusts one key; the repository at its URL is another's, offering the package."""
    trusted = Repository(tmp_path, "trusted")
    trusted.publish("el9", builds.first)
    shutil.copy(trusted.armored_key, tmp_path / "key.asc")
    Repository(tmp_path, "main").publish("el9", builds.first)
    refused = host.dnf("install", NAME, check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    assert "repomd.xml GPG signature verification error" in said, said
    assert not host.installed(NAME)
