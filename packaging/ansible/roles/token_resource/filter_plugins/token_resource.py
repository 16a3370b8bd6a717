# The role's filters. token_resource_problems: what is wrong with token_resource_resources,
# by the agent's own rules (agent/token_resource/config/, token-resource.toml(5)), so
# that tasks/validate.yml refuses bad input on the controller before any host changes.
# Rules that span resources (two resources with one env) and a probe's or a cluster pool's
# keys are left to `token-resource check`, which validates the rendered file on the host
# before it is installed. token_resource_toml: a value as the file writes it.
# token_resource_unserved: what the agent (its `status --json`) does not serve yet.
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

MAX_COUNT = 100_000
# The agent's keys of a resource's table (tests/packaging/test_ansible_role_keys.py holds
# them to config/sections.py's).
RESOURCE_KEYS = ("advertise", "count", "env", "nodes", "probe", "scope")
ADVERTISE_MODES = ("device-plugin", "dra", "node-status")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTA_PREFIX = "requests."
# "requests." + name must still be a valid qualified name: 253 - 9 characters.
_MAX_DOMAIN_LENGTH = 253 - len(_QUOTA_PREFIX)
_MAX_NAME_PART_LENGTH = 63


def token_resource_problems(resources: object) -> list[str]:
    """One message per invalid resource; an empty list when all are valid."""
    if not isinstance(resources, Mapping):
        return [f"token_resource_resources must be a dict, got {type(resources).__name__}"]
    problems = []
    for name, value in resources.items():
        problem = _name_problem(str(name)) or _value_problem(value)
        if problem:
            problems.append(f'token_resource_resources["{name}"]: {problem}')
    return problems


def _name_problem(name: str) -> str | None:
    if name.count("/") != 1:
        return 'a resource name must be "<domain>/<name>" with exactly one "/"'
    if name.startswith(_QUOTA_PREFIX):
        return 'a resource name must not start with "requests." (reserved for quotas)'
    domain, _, part = name.partition("/")
    if not 0 < len(domain) <= _MAX_DOMAIN_LENGTH:
        return f'the domain before "/" must have 1 to {_MAX_DOMAIN_LENGTH} characters'
    if not _DNS_SUBDOMAIN.fullmatch(domain):
        return (
            f'the domain "{domain}" is not a DNS subdomain: lowercase letters, digits, "-" and'
            ' ".", each dot-separated label starting and ending with a letter or digit'
        )
    if domain.endswith("kubernetes.io"):
        return f'the domain "{domain}" is reserved: kubernetes.io names are native resources'
    if not 0 < len(part) <= _MAX_NAME_PART_LENGTH:
        return f'the name after "/" must have 1 to {_MAX_NAME_PART_LENGTH} characters'
    if not _NAME_PART.fullmatch(part):
        return (
            f'the name after "/" ("{part}") must consist of letters, digits, "-", "_" and'
            ' ".", starting and ending with a letter or digit'
        )
    return None


def _value_problem(value: object) -> str | None:
    if not isinstance(value, Mapping):
        return _count_problem(value)
    unknown = sorted(str(key) for key in value if key not in RESOURCE_KEYS)
    if unknown:
        return f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(RESOURCE_KEYS)}"
    if "count" not in value:
        return "count is required when a resource is given as a table"
    if "env" in value and not (isinstance(value["env"], str) and _ENV_NAME.fullmatch(value["env"])):
        return (
            "env must be an environment variable name (letters, digits and '_', not starting"
            f" with a digit), got {value['env']!r}"
        )
    if _advertise(value) not in ADVERTISE_MODES:
        return f"advertise must be one of {', '.join(ADVERTISE_MODES)}, got {value['advertise']!r}"
    return _count_problem(value["count"])


def _count_problem(count: object) -> str | None:
    # bool is an int in Python, but `true` is a mistake, not a 1; "5" from -e key=value
    # is a string, which the TOML file would not accept either.
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_COUNT:
        return f"the count must be an integer from 0 to {MAX_COUNT}, got {count!r}"
    return None


def token_resource_toml(value: object) -> str:
    """``value`` as a TOML value: a string, integer, float, boolean, array, or an inline
    table for a mapping (a probe's, say)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string (the same escapes), non-ASCII kept as is.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        pairs = (f"{_key(key)} = {token_resource_toml(item)}" for key, item in value.items())
        return "{ " + ", ".join(pairs) + " }" if value else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(token_resource_toml(item) for item in value) + "]"
    raise TypeError(f"no TOML value for {value!r} ({type(value).__name__})")


def _key(key: object) -> str:
    text = str(key)
    return text if _BARE_KEY.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def token_resource_unserved(
    status: str, resources: Mapping[str, object], registered: bool = True
) -> list[str]:
    """What ``status`` (the agent's ``status --json``) lacks of ``resources``: each resource
    with its count, registered with the kubelet (device plugins, DRA) when ``registered``,
    and node-status counts accepted by the API server. An empty list when it serves them."""
    try:
        report = json.loads(status)
    except ValueError:
        return [f"the agent's status is not JSON: {status[:200]!r}"]
    served = {resource["name"]: resource for resource in report.get("resources") or ()}
    problems = []
    for name, value in resources.items():
        count = value["count"] if isinstance(value, Mapping) else value
        resource = served.get(name)
        if resource is None:
            problems.append(f"{name}: not served")
        elif resource["count"] != count:
            problems.append(f"{name}: count {resource['count']}, not {count}")
        elif registered and resource["registered"] is False:
            problems.append(f"{name}: not registered with the kubelet ({resource['advertise']})")
    extra = sorted(set(served) - set(resources))
    if extra:
        problems.append(f"served but not configured: {', '.join(extra)}")
    node_status = [name for name, value in resources.items() if _advertise(value) == "node-status"]
    summary = report.get("summary", "")
    if node_status and not re.search(r"node status of [^:]+: accepted", summary):
        problems.append(f"node status of {', '.join(node_status)} not accepted: {summary}")
    return problems


def _advertise(value: object) -> object:
    return value.get("advertise", ADVERTISE_MODES[0]) if isinstance(value, Mapping) else None


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {
            "token_resource_problems": token_resource_problems,
            "token_resource_toml": token_resource_toml,
            "token_resource_unserved": token_resource_unserved,
        }
