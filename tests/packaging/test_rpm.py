"""The .rpm: built once from this tree with `make -f packaging/rpm.mk rpm`, then inspected.

Runs on the host (as root, like CI). A missing rpmbuild/rpm/make/git is a FAILURE, never a
skip: CI must not pass these silently (host packages: packaging/rpm/README.md).

Environment:
  TOKEN_RESOURCE_RPM  the .noarch.rpm under test (default: built now into a temporary dir)

Every rpm command gets --dbpath in a temporary directory: Debian's rpm otherwise creates a
database in ~/.rpmdb. Nothing is left behind.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.monitoring import DASHBOARD, RULES, RULES_TESTS
from tests.packaging.test_removal_warning import CLAIMS, WARNING
from tests.packaging.test_removal_warning import run as run_with_standin
from token_resource._compat import tomllib

REPO = Path(__file__).resolve().parents[2]
NAME = "token-resource"
# The alerts, their tests and the dashboard, beside the docs (as in the .deb).
EXAMPLES = (RULES, RULES_TESTS, DASHBOARD)
UNIT = f"{NAME}.service"
CONFIG = f"/etc/{NAME}.toml"
SITELIB = re.compile(r"^/usr/lib/python3\.\d+/site-packages$")
LIBRARIES = (
    "python3-grpcio",
    "python3-protobuf",
    "python3-watchdog",
    "python3-sdnotify",
)
# Only with [metrics]: recommended, so that a repository without it does not block the install.
RECOMMENDED = ("python3-prometheus_client", "python3-pyyaml")


def project_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as pyproject:
        version = tomllib.load(pyproject)["project"]["version"]
    assert isinstance(version, str)
    return version


def run(args: list[str], timeout: float = 60) -> str:
    """Run a command; fail the test with its output when it does not succeed."""
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO
        )
    except FileNotFoundError:
        pytest.fail(f"{args[0]} is not installed (see packaging/rpm/README.md)", pytrace=False)
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(args)} exited with {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}",
            pytrace=False,
        )
    return done.stdout


@dataclass(frozen=True)
class Package:
    path: Path
    scratch: Path  # a temporary directory the tests may use; removed after the module

    def rpm(self, *args: str) -> str:
        """rpm with a throw-away database (never ~/.rpmdb)."""
        return run(["rpm", "--dbpath", str(self.scratch / "rpmdb"), *args])

    def query(self, *args: str) -> str:
        return self.rpm("-qp", *args, str(self.path))

    def files(self) -> set[str]:
        return set(self.query("-l").splitlines())

    def docdir(self) -> str:
        """Where the docs go: /usr/share/doc/token-resource on Fedora and RHEL, versioned
        (token-resource-<version>) where rpm's _docdir_fmt says so, as Debian's rpm does."""
        (readme,) = [
            line for line in self.files() if re.fullmatch(r"/usr/share/doc/[^/]+/README\.md", line)
        ]
        return readme.rsplit("/", 1)[0]

    def sitelib(self) -> str:
        """The python3 site-packages directory the package installs into."""
        found = {
            line.split("/token_resource")[0] for line in self.files() if "/token_resource/" in line
        }
        assert len(found) == 1, f"token_resource is installed in {found or 'no directory'}"
        (sitelib,) = found
        assert SITELIB.match(sitelib), f"{sitelib} is not a python3 site-packages directory"
        return sitelib


@pytest.fixture(scope="module")
def package() -> Iterator[Package]:
    for tool in ("rpm", "rpmbuild", "make", "git"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (see packaging/rpm/README.md)", pytrace=False)
    scratch = Path(tempfile.mkdtemp(prefix="token-resource-rpmtest-"))
    try:
        given = os.environ.get("TOKEN_RESOURCE_RPM")
        if given:
            path = Path(given).resolve()
        else:
            dist = scratch / "dist"
            run(
                [
                    "make", "-s", "-C", str(REPO), "-f", "packaging/rpm.mk", "rpm",
                    f"RPM_DIST={dist}", f"RPM_TOPDIR={scratch / 'rpmbuild'}",
                ],
                timeout=300,
            )  # fmt: skip
            path = dist / f"{NAME}-{project_version()}-1.noarch.rpm"
        if not path.is_file():
            pytest.fail(f"{path} was not built", pytrace=False)
        yield Package(path, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_name_version_and_arch_come_from_pyproject(package: Package) -> None:
    name, version, release, arch = package.query(
        "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}"
    ).split()
    assert (name, version, arch) == (NAME, project_version(), "noarch")
    assert release.startswith("1")
    assert package.path.name == f"{NAME}-{version}-{release}.noarch.rpm"


def test_files_are_the_agent_its_command_unit_config_man_pages_and_examples(
    package: Package,
) -> None:
    files = package.files()
    sitelib = package.sitelib()
    # Every module and data file of the source package is shipped, the generated protocol
    # module included; a missed package-data pattern or subpackage shows up here.
    source = REPO / "agent" / "token_resource"
    expected = {
        f"{sitelib}/token_resource/{path.relative_to(source).as_posix()}"
        for path in source.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert f"{sitelib}/token_resource/protocol/deviceplugin_pb2.py" in expected
    assert expected <= files, sorted(expected - files)
    assert f"{sitelib}/token_resource-{project_version()}.dist-info/entry_points.txt" in files
    for path in (
        f"/usr/bin/{NAME}",
        f"/usr/lib/systemd/system/{UNIT}",
        CONFIG,
        f"/etc/{NAME}.d",
    ):
        assert path in files, path
    for page in (f"/usr/share/man/man8/{NAME}.8", f"/usr/share/man/man5/{NAME}.toml.5"):
        assert page in files or f"{page}.gz" in files, page
    docs = package.docdir()
    for example in EXAMPLES:
        assert f"{docs}/examples/{example.name}" in files, example


def test_requires_name_the_distribution_libraries(package: Package) -> None:
    requires = {line.split()[0] for line in package.query("--requires").splitlines()}
    missing = set(LIBRARIES) - requires
    assert not missing, f"no Requires: for {sorted(missing)} in {sorted(requires)}"
    abi = re.search(r"^python\(abi\) = (3\.\d+)$", package.query("--requires"), re.M)
    assert abi, "no python(abi) requirement"
    # tomli only where the interpreter lacks tomllib.
    needs_tomli = tuple(int(part) for part in abi.group(1).split(".")) < (3, 11)
    assert ("python3-tomli" in requires) == needs_tomli
    recommends = package.query("--recommends").split()
    assert set(RECOMMENDED) <= set(recommends), recommends
    assert not any("prometheus" in line for line in requires)


def scriptlets(package: Package) -> dict[str, str]:
    """--scripts output split into {'postinstall': body, 'preuninstall': ..., ...}."""
    header = re.compile(r"^(\w+) scriptlet(?: \(using [^)]*\))?:$", re.M)
    parts = header.split(package.query("--scripts"))
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_scriptlets_enable_hand_over_and_stop_the_unit(package: Package) -> None:
    scripts = scriptlets(package)
    assert {"postinstall", "preuninstall", "postuninstall", "posttrans"} <= scripts.keys()
    post, preun, postun = scripts["postinstall"], scripts["preuninstall"], scripts["postuninstall"]
    # Install: enabled as the preset policy says (what %systemd_post does; newer Fedora
    # macros call systemd-update-helper instead of systemctl).
    assert re.search(
        rf"(systemctl .*\b(preset|enable)\b|systemd-update-helper install-system-units).*{UNIT}",
        post,
    ), post
    # Removal: disabled and stopped; upgrades leave it alone here.
    assert re.search(
        rf"(systemctl .*\bdisable\b|systemd-update-helper remove-system-units).*{UNIT}", preun
    ), preun
    assert re.search(rf"(systemctl .*\bstop\b|disable --now|remove-system-units).*{UNIT}", preun), (
        preun
    )
    # Upgrade: no restart; once the transaction is done, the running agent hands over.
    assert not re.search(r"try-restart|mark-restart-system-units", postun), postun
    assert "token-resource handover --else-restart" in scripts["posttrans"], scripts["posttrans"]
    for name, body in scripts.items():
        subprocess.run(["sh", "-n"], input=body, text=True, check=True)
        assert "systemctl" not in body or "|| :" in body or "|| true" in body, (
            f"{name}: a failing systemctl must not fail the transaction"
        )


def run_scriptlet(body: str, arg: int, systemd_running: bool, scratch: Path) -> list[str]:
    """Run a scriptlet as rpm would ($1 = arg) with a fake systemctl; return its calls.

    /run/systemd/system (systemd is PID 1) is swapped for a directory that exists or not.
    """
    fake = scratch / "fake-bin"
    fake.mkdir(exist_ok=True)
    (fake / "systemctl").write_text('#!/bin/sh\necho "$*" >> "$SYSTEMCTL_LOG"\n')
    # The agent's command: only its handover is logged (the removal's status query fails).
    (fake / "token-resource").write_text(
        '#!/bin/sh\n[ "$1" = handover ] || exit 1\necho token-resource "$*" >> "$SYSTEMCTL_LOG"\n'
    )
    for command in ("systemctl", "token-resource"):
        (fake / command).chmod(0o755)
    running = scratch / "run-systemd-system"
    shutil.rmtree(running, ignore_errors=True)
    if systemd_running:
        running.mkdir()
    log = scratch / "systemctl.log"
    log.write_text("")
    body = body.replace("/run/systemd/system", str(running)).replace("/usr/bin/", "")
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SYSTEMCTL_LOG": str(log)}
    subprocess.run(["sh", "-e", "-c", body, "scriptlet", str(arg)], env=env, check=True)
    return log.read_text().splitlines()


def test_fallback_scriptlets_do_what_the_systemd_macros_do(package: Package) -> None:
    scripts = scriptlets(package)
    if "systemctl" not in "".join(scripts.values()):
        # Built with systemd-rpm-macros (Fedora/RHEL): the helper does the work.
        assert "systemd-update-helper" in scripts["postinstall"], scripts
        return
    post, preun, postun = scripts["postinstall"], scripts["preuninstall"], scripts["postuninstall"]
    scratch = package.scratch
    # $1 is the number of instances installed after the transaction: 1 on first install
    # (post) or on upgrade (preun/postun), 2 on upgrade (post), 0 on removal.
    assert run_scriptlet(post, 1, True, scratch) == [f"--no-reload preset {UNIT}"]
    assert run_scriptlet(post, 2, True, scratch) == []
    assert run_scriptlet(preun, 0, True, scratch) == [
        f"--no-reload disable {UNIT}",
        f"stop {UNIT}",
    ]
    assert run_scriptlet(preun, 0, False, scratch) == [f"--no-reload disable {UNIT}"]
    assert run_scriptlet(preun, 1, True, scratch) == []
    assert run_scriptlet(postun, 1, True, scratch) == ["daemon-reload"]
    assert run_scriptlet(postun, 0, True, scratch) == ["daemon-reload"]
    assert run_scriptlet(postun, 1, False, scratch) == []
    # After the transaction: a running agent hands over to the code now installed.
    posttrans = scripts["posttrans"]
    handover = "token-resource handover --else-restart --timeout 60"
    assert run_scriptlet(posttrans, 0, True, scratch) == [f"is-active --quiet {UNIT}", handover]
    assert run_scriptlet(posttrans, 0, False, scratch) == []


def test_the_built_preuninstall_warns_of_pods_holding_dra_claims_on_removal_only(
    package: Package, tmp_path: Path
) -> None:
    # The scriptlet as built (with or without the systemd macros), the agent's command a
    # stand-in (tests/packaging/test_removal_warning.py) and systemctl one that does nothing.
    preun = scriptlets(package)["preuninstall"].replace(
        "/run/systemd/system", str(tmp_path / "no-systemd")
    )
    fakes = tmp_path / "bin"
    fakes.mkdir()
    (fakes / "systemctl").write_text("#!/bin/sh\n")
    (fakes / "systemctl").chmod(0o755)
    for instances, warning in ((0, WARNING), (1, "")):
        done, _ = run_with_standin(
            tmp_path, ["/bin/sh", "-e", "-c", preun, "scriptlet", str(instances)], CLAIMS
        )
        assert (done.returncode, done.stderr) == (0, warning), done


def test_config_is_noreplace(package: Package) -> None:
    assert CONFIG in package.query("--configfiles").splitlines()
    flags = dict(
        line.rsplit(" ", 1)
        for line in package.query("--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]").splitlines()
    )
    assert "c" in flags[CONFIG], f"{CONFIG} is not %config: flags {flags[CONFIG]!r}"
    assert "n" in flags[CONFIG], f"{CONFIG} is not %config(noreplace): flags {flags[CONFIG]!r}"


def test_installs_into_a_root_with_the_expected_layout(package: Package) -> None:
    root = package.scratch / "root"
    root.mkdir()
    db = "/var/lib/rpm"  # inside root: rpm prefixes --dbpath with --root
    install = ["--root", str(root), "--dbpath", db, "--nodeps", "--noscripts"]
    run(["rpm", "-ivh", *install, str(package.path)])
    sitelib = package.sitelib()

    command = root / "usr/bin" / NAME
    assert os.access(command, os.X_OK)
    assert command.read_text().startswith("#!/usr/bin/python3\n")
    assert "token_resource.cli" in command.read_text()
    for module in ("__init__.py", "protocol/__init__.py", "protocol/deviceplugin_pb2.py"):
        assert (root / sitelib.lstrip("/") / "token_resource" / module).is_file(), module
    assert (root / f"usr/lib/systemd/system/{UNIT}").read_bytes() == (
        REPO / "systemd" / UNIT
    ).read_bytes()
    config = root / CONFIG.lstrip("/")
    assert config.read_bytes() == (REPO / "etc" / f"{NAME}.toml").read_bytes()
    assert (root / f"etc/{NAME}.d").is_dir()
    for page, source in (
        (f"usr/share/man/man8/{NAME}.8", f"{NAME}.8"),
        (f"usr/share/man/man5/{NAME}.toml.5", f"{NAME}.toml.5"),
    ):
        gz = root / f"{page}.gz"
        text = gzip.decompress(gz.read_bytes()) if gz.exists() else (root / page).read_bytes()
        assert text == (REPO / "packaging/man" / source).read_bytes(), page
    for example in EXAMPLES:
        installed = root / f"{package.docdir().lstrip('/')}/examples/{example.name}"
        assert installed.read_bytes() == example.read_bytes(), example
    verify = subprocess.run(
        ["rpm", "--root", str(root), "--dbpath", db, "-V", "--nodeps", NAME],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # %config(noreplace): a local edit survives reinstalling the package, and is kept as
    # .rpmsave when the package is erased.
    config.write_text(config.read_text() + "# local edit\n")
    run(["rpm", "-Uvh", "--replacepkgs", *install, str(package.path)])
    assert config.read_text().endswith("# local edit\n")
    run(["rpm", "-e", "--root", str(root), "--dbpath", db, "--nodeps", "--noscripts", NAME])
    assert not config.exists()
    assert (root / f"etc/{NAME}.toml.rpmsave").read_text().endswith("# local edit\n")
    assert not (root / "usr/bin" / NAME).exists()
