# The role's filter token_resource_package: which package a host gets, from its facts.
#
# "native" is token-resource, which uses the distribution's python3-grpcio, -protobuf,
# -watchdog and -sdnotify; "bundled" is token-resource-bundled, which carries PyPI's wheels
# for one Python version and architecture (packaging/bundled.mk) and needs only the
# system's python3 (>= 3.9), systemd and libc. The table is the one in README.md's
# install section and /work/shared/docs/distributions.md: a distribution not in it needs
# token_resource_package_flavour set by the operator (and, for bundled,
# token_resource_bundled_python).
from __future__ import annotations

from collections.abc import Mapping

FLAVOURS = ("auto", "native", "bundled")
# ansible_facts['architecture'] -> the package architecture of each packaging system.
ARCHITECTURES = {"x86_64": ("amd64", "x86_64"), "aarch64": ("arm64", "aarch64")}
# Hosts whose own libraries are too old (or missing): the system python3 of each, which
# the bundled build must match.
BUNDLED_PYTHON = {
    ("Debian", "11"): "3.9",
    ("Ubuntu", "22"): "3.10",
    ("Amazon", "2023"): "3.9",
    ("EL", "9"): "3.9",
}
ENTERPRISE_LINUX = ("RedHat", "Rocky", "AlmaLinux", "CentOS", "OracleLinux")


class ChoiceError(Exception):
    pass


def _auto(distribution: str, major: int, epel: bool) -> str:
    if distribution == "Debian" and major >= 12:
        return "native"
    if distribution == "Ubuntu" and major >= 24:
        return "native"
    if distribution == "Fedora":
        return "native"
    if distribution in ENTERPRISE_LINUX and major == 9:
        # EPEL 9 has python3-grpcio; without it the native package cannot install.
        return "native" if epel else "bundled"
    if (distribution, major) in (("Debian", 11), ("Ubuntu", 22), ("Amazon", 2023)):
        return "bundled"
    raise ChoiceError(
        f"no package is known to fit {distribution} {major}: set token_resource_package_flavour"
        " (native or bundled) for this host"
    )


def token_resource_package(
    facts: Mapping[str, object],
    flavour: str = "auto",
    epel: bool = False,
    bundled_python: str = "",
) -> dict[str, str]:
    """{flavour, python, arch, build} for a host, from its ansible_facts.

    build is the key of token_resource_bundled_package_files ("python3.9-amd64"); python,
    arch and build are "" for the native package (architecture all/noarch).
    """
    if flavour not in FLAVOURS:
        raise ChoiceError(
            f"token_resource_package_flavour must be one of {FLAVOURS}, got {flavour!r}"
        )
    distribution = str(facts.get("distribution", ""))
    version = str(facts.get("distribution_major_version", ""))
    # Ubuntu's major version is the year: 22 for 22.04, 24 for 24.04.
    major = int(version) if version.isdigit() else -1
    chosen = _auto(distribution, major, bool(epel)) if flavour == "auto" else flavour
    if chosen == "native":
        return {"flavour": "native", "python": "", "arch": "", "build": ""}
    family = "EL" if distribution in ENTERPRISE_LINUX else distribution
    python = bundled_python or BUNDLED_PYTHON.get((family, version), "")
    if not python:
        raise ChoiceError(
            f"which Python to build token-resource-bundled for is not known for {distribution}"
            f" {version}: set token_resource_bundled_python (its /usr/bin/python3, 3.9 or newer)"
        )
    machine = str(facts.get("architecture", ""))
    if machine not in ARCHITECTURES:
        raise ChoiceError(
            f"token-resource-bundled is built for {', '.join(ARCHITECTURES)} only, not {machine!r}"
        )
    deb_arch, rpm_arch = ARCHITECTURES[machine]
    arch = deb_arch if facts.get("os_family") == "Debian" else rpm_arch
    return {
        "flavour": "bundled",
        "python": python,
        "arch": arch,
        "build": f"python{python}-{arch}",
    }


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"token_resource_package": token_resource_package}
