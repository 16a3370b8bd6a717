"""What each RPM distribution provides that the package may ask for: its Python, the python3-*
libraries and systemd, written from its package indexes (packaging/README.md's table names
the sources). tests/packaging/test_rpm_targets.py checks every requirement against it, and
tests/packaging/test_rpm_repository.py makes a stand-in of EL9's repositories from it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Distribution:
    python: str  # the interpreter's X.Y: python(abi), python3.Ydist(...), site-packages
    libraries: dict[str, str]  # python3-<project> package -> version, as in the indexes
    systemd: str
    vendors_watchdog: bool = False
    # What every such system has: the shell and the interpreter's own package.
    base: set[str] = field(default_factory=lambda: {"/bin/sh", "/usr/bin/python3"})

    def provides(self) -> dict[str, str | None]:
        """Capability -> version (None: unversioned), as these packages provide them."""
        provided: dict[str, str | None] = dict.fromkeys(self.base)
        provided["python(abi)"] = self.python
        provided["systemd"] = self.systemd
        for package, version in self.libraries.items():
            project = package.removeprefix("python3-")
            provided[package] = version
            provided[f"python{self.python}dist({project})"] = version
        return provided


# Written from packages.fedoraproject.org (Fedora, EPEL) and RHEL 9 package listings; see the
# table in packaging/README.md for the sources of each number.
DISTRIBUTIONS = {
    "el9": Distribution(
        python="3.9",
        libraries={
            "python3-grpcio": "1.46.7",  # EPEL 9
            "python3-protobuf": "3.14.0",  # RHEL 9 AppStream
            "python3-sdnotify": "0.3.2",  # EPEL 9
            "python3-tomli": "2.0.1",  # RHEL 9 AppStream
        },
        systemd="252",
        vendors_watchdog=True,  # no python3-watchdog in RHEL 9 or EPEL 9
    ),
    "fedora44": Distribution(
        python="3.14",
        libraries={
            "python3-grpcio": "1.48.4",
            "python3-protobuf": "3.19.6",
            "python3-watchdog": "6.0.0",
            "python3-sdnotify": "0.3.2",
        },
        systemd="259.6",
    ),
    "fedora45": Distribution(
        python="3.15",
        libraries={
            "python3-grpcio": "1.48.4",
            "python3-protobuf": "6.33.5",
            "python3-watchdog": "6.0.0",
            "python3-sdnotify": "0.3.2",
        },
        systemd="262.1",
    ),
}
