"""A Debian "node" with systemd as PID 1, for the system tests: Debian 12 or 13 (11: bundled).

Each suite's rootfs is debootstrapped once and cached as a tarball keyed on everything that
goes into it (the suite first); each test session unpacks the suites it needs once, and every
container boots from it with ``--volatile=overlay`` (writes go to a tmpfs), so containers
start pristine and several can share one rootfs. The host is not expected to run systemd:
containers are driven with ``nsenter``, and each nspawn process lives in a cgroup of its own
that teardown empties and removes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The Debian releases a node can run: Debian 12 (systemd 252, Python 3.11) and Debian 13
# (systemd 257, Python 3.13). Every system test runs on DEFAULT_SUITE; the ones marked
# @pytest.mark.suites(...) run on each suite they name (tests/system/conftest.py).
SUITES = ("bookworm", "trixie")
DEFAULT_SUITE = "bookworm"
# Debian 11 (systemd 247, Python 3.9): too old for the native .deb; only the self-contained
# token-resource-bundled package runs there (tests/system/test_bundled_deb.py).
BUNDLED_SUITES = ("bullseye",)
KNOWN_SUITES = SUITES + BUNDLED_SUITES
# Installed in the rootfs: what a minimal systemd node needs.
INCLUDE = ("systemd", "systemd-sysv", "dbus", "procps", "python3")
# Downloaded only (kept in the rootfs's apt cache with the package lists): the .deb's
# runtime dependencies, so `apt-get install ./token-resource_*.deb` resolves and installs
# Debian's own python3-* libraries as dependencies, without a network. python3-apt is what
# Ansible's apt module needs on a node (tests/system/test_ansible.py installs it from here).
DOWNLOAD_ONLY = (
    "python3-grpcio",
    "python3-protobuf",
    "python3-sdnotify",
    "python3-watchdog",
    "python3-apt",
    # Suggested by the .deb: reading a kubeconfig (node-status and DRA resources).
    "python3-yaml",
)
# Downloaded only, in one suite's rootfs: Debian 13's containerd (1.7, CDI read with
# enable_cdi, the CDI library's version rules enforced), which tests/system/test_cdi_containerd.py
# unpacks and runs on the host.
DOWNLOAD_ONLY_BY_SUITE = {"trixie": ("containerd",)}
# Bump to rebuild every cached rootfs when the recipe below changes.
RECIPE = 1

# Tools the harness runs on the host, and the Debian package providing each.
HOST_TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "nsenter": "util-linux",
    "tar": "tar",
    "dpkg-buildpackage": "dpkg-dev",
    "dh": "debhelper",
    "lintian": "lintian",
    # the container image: built by mmdebstrap, run by runc, imported by containerd's ctr
    "mmdebstrap": "mmdebstrap",
    "runc": "runc",
    "containerd": "containerd",
    "ctr": "containerd",
}

CGROUP_HIERARCHIES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/systemd"))
# How long a boot may take to reach "running", and a stopped container's processes to go and
# its cgroups to empty: waits for an event, generous for a busy 2-core machine.
BOOT_TIMEOUT_SECONDS = 180.0
TEARDOWN_TIMEOUT_SECONDS = 30.0
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class HarnessError(Exception):
    """The machine cannot run the system tests (a missing tool, no root, no mirror...)."""


def check_host() -> None:
    if os.geteuid() != 0:
        raise HarnessError("the system tests need root (debootstrap, systemd-nspawn, nsenter)")
    missing = [
        f"{tool} (apt package {package})"
        for tool, package in HOST_TOOLS.items()
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None
    ]
    if missing:
        raise HarnessError(
            "missing on the host: " + ", ".join(missing) + "; see packaging/README-system-tests.md"
        )
    machine_id = Path("/etc/machine-id")
    if not machine_id.exists() or not machine_id.read_text().strip():
        raise HarnessError(
            "systemd-nspawn refuses to run with an empty /etc/machine-id "
            "(run systemd-machine-id-setup)"
        )


def _host_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) of each `deb` source of the host (deb822 first, then the one-line format)."""
    sources: list[tuple[str, list[str]]] = []
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.exists():
        for stanza in deb822.read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "deb").split() and fields.get("URIs"):
                sources.append((fields["URIs"].split()[0], fields.get("Suites", "").split()))
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for uri, suite in re.findall(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s", legacy.read_text(), re.M
        ):
            sources.append((uri, [suite]))
    return sources


def debian_mirror(suite: str = DEFAULT_SUITE) -> str:
    """The host's Debian mirror for suite.

    A source that names the suite wins; otherwise the host's own Debian archive (a source
    naming a release, not its -updates or -security), which carries every Debian release.
    """
    sources = _host_sources()
    for uri, suites in sources:
        if suite in suites:
            return uri
    for uri, suites in sources:
        if any("-" not in name for name in suites):
            return uri
    raise HarnessError(f"no Debian mirror for {suite} in /etc/apt/sources.list(.d)")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "token-resource-tests"


def rootfs_tarball(suite: str = DEFAULT_SUITE) -> Path:
    """The cached rootfs tarball of suite, built (about 2 minutes) when missing."""
    if suite not in KNOWN_SUITES:
        raise HarnessError(f"unknown suite {suite!r}; the harness knows {', '.join(KNOWN_SUITES)}")
    mirror = debian_mirror(suite)
    recipe = {
        "recipe": RECIPE,
        "suite": suite,
        "mirror": mirror,
        "variant": "minbase",
        "include": sorted(INCLUDE),
        "download_only": sorted(_download_only(suite)),
    }
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / f"rootfs-{suite}-{key}.tar.gz"
    # One builder per tarball at a time, the others reuse its result; building one suite
    # does not hold up sessions that only need another.
    with open(directory / f".{tarball.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.exists():
            _build_rootfs_tarball(tarball, suite, mirror)
            (directory / f"{tarball.name}.json").write_text(json.dumps(recipe, indent=1) + "\n")
    return tarball


def _download_only(suite: str) -> tuple[str, ...]:
    return DOWNLOAD_ONLY + DOWNLOAD_ONLY_BY_SUITE.get(suite, ())


def _build_rootfs_tarball(tarball: Path, suite: str, mirror: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="build-", dir=tarball.parent))
    try:
        rootfs = work / "rootfs"
        run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(INCLUDE),
                suite,
                str(rootfs),
                mirror,
            ],
            timeout=900,
        )
        _configure_rootfs(rootfs)
        chroot = [
            "chroot",
            str(rootfs),
            "env",
            "-i",
            f"PATH={CONTAINER_PATH}",
            "DEBIAN_FRONTEND=noninteractive",
        ]
        run([*chroot, "apt-get", "update", "-q"], timeout=300)
        run(
            [*chroot, "apt-get", "install", "-q", "-y", "--download-only", *_download_only(suite)],
            timeout=600,
        )
        partial = tarball.with_suffix(".partial")
        run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "--xattrs", "-czf", str(partial), "."],
            timeout=600,
        )
        partial.rename(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _configure_rootfs(rootfs: Path) -> None:
    apt = rootfs / "etc/apt/apt.conf.d"
    # Keep downloaded .debs and the lists; no recommends, as on a lean node.
    (apt / "90token-resource-tests").write_text(
        'APT::Install-Recommends "false";\n'
        'APT::Keep-Downloaded-Packages "true";\n'
        'Acquire::Languages "none";\n'
    )
    (apt / "docker-clean").unlink(missing_ok=True)
    (rootfs / "etc/dpkg/dpkg.cfg.d/90token-resource-tests").write_text("force-unsafe-io\n")
    (rootfs / "etc/hostname").write_text("node\n")
    # Empty: systemd gives every boot a fresh transient machine id.
    (rootfs / "etc/machine-id").write_text("")
    # No consoles in a background container.
    for unit in ("console-getty.service", "getty@tty1.service"):
        (rootfs / "etc/systemd/system" / unit).unlink(missing_ok=True)
        (rootfs / "etc/systemd/system" / unit).symlink_to("/dev/null")


def unpack_rootfs(tarball: Path, into: Path) -> Path:
    rootfs = into / "rootfs"
    rootfs.mkdir()
    run(
        ["tar", "-C", str(rootfs), "--numeric-owner", "--xattrs", "-xzf", str(tarball)], timeout=300
    )
    return rootfs


def run(
    argv: Sequence[str], *, timeout: float, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a host command, failing with its output (not just its exit code) if check fails."""
    result = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise HarnessError(
            f"{' '.join(argv)} exited {result.returncode}\n"
            f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n"
            f"{result.stderr[-4000:]}"
        )
    return result


class CommandFailed(AssertionError):
    pass


@dataclass
class Node:
    """One booted container. Use boot() as a context manager: it always tears down."""

    rootfs: Path
    binds: Sequence[tuple[Path, str]] = ()
    # Writes go to a tmpfs over the rootfs, gone at power-off; without it, to the rootfs itself
    # (tests/system/reboot.py gives each node an overlay of its own for that).
    volatile: bool = True
    name: str = field(default_factory=lambda: "trtest-" + uuid.uuid4().hex[:8])
    leader: int = 0
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def cgroups(self) -> list[Path]:
        return [hierarchy / self.name for hierarchy in CGROUP_HIERARCHIES if hierarchy.is_dir()]

    def start(self, workdir: Path) -> None:
        for cgroup in self.cgroups:
            cgroup.mkdir()
        self.log = workdir / f"{self.name}.nspawn.log"
        argv = [
            "systemd-nspawn",
            "--quiet",
            "-D",
            str(self.rootfs),
            "--boot",
            *(["--volatile=overlay"] if self.volatile else []),
            "--keep-unit",
            "--register=no",
            "--private-network",
            "--link-journal=no",
            "--console=passive",
            f"--machine={self.name}",
            *(f"--bind-ro={host}:{inside}" for host, inside in self.binds),
        ]
        # The shell moves itself into the container's own cgroups, then becomes nspawn, so
        # nspawn's /payload and /supervisor land below them and teardown can remove all.
        join = "; ".join(f'echo $$ > "{cgroup}/cgroup.procs"' for cgroup in self.cgroups)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
        with open(self.log, "ab") as log:  # a rebooted node keeps its earlier boots' lines
            self.process = subprocess.Popen(
                ["sh", "-c", f'{join}; exec "$@"', "sh", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.leader = self._wait_for_leader(timeout=30)
        # A boot takes 2-5 s alone; beside make test's Go builds and unit runs it can take many
        # times that, and a failure to boot is told by nspawn's exit or a degraded state anyway.
        self._wait_until_running(timeout=BOOT_TIMEOUT_SECONDS)

    def _wait_for_leader(self, timeout: float) -> int:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HarnessError(
                    f"systemd-nspawn exited {self.process.returncode}:\n" + self.nspawn_log()
                )
            for child in _children(self.process.pid):
                if _comm(child) == "systemd":
                    return child
            time.sleep(0.05)
        raise HarnessError("the container's systemd did not start:\n" + self.nspawn_log())

    def _wait_until_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            result = self.sh("systemctl is-system-running", check=False, timeout=30)
            state = result.stdout.strip()
            if state == "running":
                return
            if state == "degraded":
                raise HarnessError(
                    f"the container booted degraded; failed units:\n{self.failed_units()}"
                )
            time.sleep(0.1)
        raise HarnessError(f"the container is still {state!r} after {timeout} s")

    def failed_units(self) -> str:
        """systemd's list of failed units in the container, one per line."""
        return self.sh("systemctl --failed --no-legend", check=False).stdout

    def exec(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 120,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the container (all its namespaces, a clean environment)."""
        full = [
            "nsenter",
            "-t",
            str(self.leader),
            "--all",
            "--",
            "env",
            "-i",
            f"PATH={CONTAINER_PATH}",
            "LANG=C.UTF-8",
            "SYSTEMD_PAGER=",
            "SYSTEMD_COLORS=0",
            "DEBIAN_FRONTEND=noninteractive",
            *argv,
        ]
        result = subprocess.run(
            full, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise CommandFailed(
                f"in the container: {' '.join(argv)} exited "
                f"{result.returncode}\n--- stdout\n{result.stdout[-6000:]}\n"
                f"--- stderr\n{result.stderr[-6000:]}"
            )
        return result

    def sh(self, script: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return self.exec(["sh", "-c", script], **kwargs)  # type: ignore[arg-type]

    def write(self, path: str, text: str) -> None:
        self.exec(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path], input=text)

    def read(self, path: str) -> str:
        return self.exec(["cat", path]).stdout

    def journal(self) -> str:
        if not self.leader or self.process is None or self.process.poll() is not None:
            return "(container not running)\n" + self.nspawn_log()
        try:
            return self.exec(
                ["journalctl", "-b", "--no-pager", "-o", "short-monotonic"], check=False, timeout=60
            ).stdout
        except subprocess.TimeoutExpired:
            return "(journalctl timed out)"

    def nspawn_log(self) -> str:
        return (
            self.log.read_text(errors="replace")[-6000:] if self.log and self.log.exists() else ""
        )

    def stop(self) -> None:
        """Power the container off (SIGTERM to nspawn), kill what is left, remove cgroups."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._kill_cgroups()
                self.process.kill()
                self.process.wait(timeout=20)
        self._kill_cgroups()
        for cgroup in self.cgroups:
            _remove_cgroup_tree(cgroup)

    def _kill_cgroups(self) -> None:
        for cgroup in self.cgroups:
            kill = cgroup / "cgroup.kill"
            if kill.exists():
                kill.write_text("1")
        deadline = time.monotonic() + TEARDOWN_TIMEOUT_SECONDS
        while time.monotonic() < deadline and any(_cgroup_pids(c) for c in self.cgroups):
            for cgroup in self.cgroups:
                for pid in _cgroup_pids(cgroup):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)


@contextlib.contextmanager
def boot(rootfs: Path, workdir: Path, binds: Sequence[tuple[Path, str]] = ()) -> Iterator[Node]:
    node = Node(rootfs=rootfs, binds=binds)
    try:
        node.start(workdir)
        yield node
    finally:
        node.stop()


def _children(pid: int) -> list[int]:
    children: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                children += [int(c) for c in (task / "children").read_text().split()]
    return children


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


def _cgroup_pids(cgroup: Path) -> list[int]:
    pids: list[int] = []
    if cgroup.is_dir():
        for directory, _, files in os.walk(cgroup):
            if "cgroup.procs" in files:
                with contextlib.suppress(FileNotFoundError, OSError):
                    pids += [int(p) for p in Path(directory, "cgroup.procs").read_text().split()]
    return pids


def _remove_cgroup_tree(cgroup: Path) -> None:
    if not cgroup.is_dir():
        return
    for directory, _, _ in sorted(os.walk(cgroup), key=lambda entry: -len(entry[0])):
        deadline = time.monotonic() + TEARDOWN_TIMEOUT_SECONDS
        while True:
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def build_rootfs_tarballs() -> list[Path]:
    """Every suite's rootfs tarball, the missing ones built side by side (they wait on the
    mirror and dpkg): `make system-rootfs`, which make test starts at once, beside the unit runs,
    so that no system test's time limit covers a debootstrap on a busy machine."""
    with concurrent.futures.ThreadPoolExecutor(len(KNOWN_SUITES)) as pool:
        return list(pool.map(rootfs_tarball, KNOWN_SUITES))


if __name__ == "__main__":
    for built in build_rootfs_tarballs():
        print(built)


def project_version() -> str:
    pyproject = (REPO / "pyproject.toml").read_text()
    match = re.search(r'^\[project\][^[]*?^version\s*=\s*"([^"]+)"', pyproject, re.M | re.S)
    assert match, "no [project].version in pyproject.toml"
    return match.group(1)


def build_deb(version: str, into: Path) -> Path:
    """`make deb` of this tree as ``version`` (no lintian), into ``into``."""
    run(
        [
            "make",
            "-s",
            "-C",
            str(REPO),
            "-f",
            "packaging/deb.mk",
            "deb",
            f"DEB_VERSION={version}",
            "DEB_LINT=no",
            f"DEB_DIST={into}",
        ],
        timeout=600,
    )
    return into / f"token-resource_{version}_all.deb"


def deb_version(deb: Path) -> str:
    """The Version of the .deb ``deb``."""
    return run(["dpkg-deb", "--field", str(deb), "Version"], timeout=30).stdout.strip()
