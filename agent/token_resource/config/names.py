"""The kubelet's rules for extended resource names, the environment variable named after one,
and the names of a resource's tokens."""

from __future__ import annotations

import re

from token_resource.config.errors import quote

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(_DNS_LABEL)
MAX_DNS_LABEL_LENGTH = 63
DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
MAX_DNS_SUBDOMAIN_LENGTH = 253
# A qualified name's name part, which is also what a label key's name and a label value are.
NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
MAX_NAME_PART_LENGTH = 63
# The kubelet also requires "requests." + name to be a valid qualified name (the resource's
# quota key), which leaves the domain 9 characters short of a DNS subdomain's 253.
_QUOTA_PREFIX = "requests."
_MAX_DOMAIN_LENGTH = MAX_DNS_SUBDOMAIN_LENGTH - len(_QUOTA_PREFIX)
# The kubelet treats any name containing "kubernetes.io/" as a native resource.
_RESERVED_DOMAIN_SUFFIX = "kubernetes.io"
# A resource of count N has the tokens token-0 .. token-<N-1>: device IDs for the kubelet,
# device names in ResourceSlices, the names operators read in status and the journal.
TOKEN_ID_PREFIX = "token-"


_TOKEN_ID = re.compile(rf"{re.escape(TOKEN_ID_PREFIX)}(0|[1-9][0-9]*)")
MAX_DEVICE_ID_LENGTH = 63


def token_id(index: int) -> str:
    return f"{TOKEN_ID_PREFIX}{index}"


def token_index(device_id: str) -> int | None:
    """The index behind a canonical token ID, or None for anything else."""
    # Device IDs hold at most 63 characters; a longer digit run would also be slow to convert
    # (and beyond Python's int() digit limit).
    if len(device_id) > MAX_DEVICE_ID_LENGTH:
        return None
    match = _TOKEN_ID.fullmatch(device_id)
    return int(match.group(1)) if match else None


def default_env_name(resource_name: str) -> str:
    """E.g. "example.com/token" -> "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"."""
    return "TOKEN_RESOURCE_" + re.sub(r"[^A-Za-z0-9]+", "_", resource_name).upper()


def resource_name_problem(name: str) -> str | None:
    """Why the kubelet would refuse `name` as an extended resource name, or None if it would not."""
    if name.count("/") != 1:
        return 'a resource name must be "<domain>/<name>" with exactly one "/"'
    if name.startswith(_QUOTA_PREFIX):
        return f'a resource name must not start with "{_QUOTA_PREFIX}" (reserved for quotas)'
    domain, _, part = name.partition("/")
    return _domain_problem(domain) or _name_part_problem(part)


def _domain_problem(domain: str) -> str | None:
    if not domain:
        return 'the domain before "/" is empty'
    if len(domain) > _MAX_DOMAIN_LENGTH:
        return f"the domain is longer than {_MAX_DOMAIN_LENGTH} characters"
    if not DNS_SUBDOMAIN.fullmatch(domain):
        return (
            f"the domain {quote(domain)} is not a DNS subdomain: lowercase letters, digits, '-'"
            " and '.', each dot-separated label starting and ending with a letter or digit"
        )
    if domain.endswith(_RESERVED_DOMAIN_SUFFIX):
        return f"the domain {quote(domain)} is reserved: kubernetes.io names are native resources"
    return None


def _name_part_problem(part: str) -> str | None:
    if not part:
        return 'the name after "/" is empty'
    if len(part) > MAX_NAME_PART_LENGTH:
        return f'the name after "/" is longer than {MAX_NAME_PART_LENGTH} characters'
    if not NAME_PART.fullmatch(part):
        return (
            f"the name after \"/\" ({quote(part)}) must consist of letters, digits, '-', '_'"
            " and '.', starting and ending with a letter or digit"
        )
    return None
