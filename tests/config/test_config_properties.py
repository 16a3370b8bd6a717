"""Property tests: whatever the documents, parse_config answers with a Config or a ConfigError."""

from __future__ import annotations

import datetime
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from token_resource.config.diff import diff_configs
from token_resource.config.errors import ConfigError
from token_resource.config.load import parse_config
from token_resource.config.model import MAX_COUNT, Config
from token_resource.config.names import default_env_name

# CPU-bound Hypothesis runs: minutes under load (a busy CI machine, the suite's own workers).
pytestmark = pytest.mark.timeout(600)

# Bounded, and without an example database so that runs leave nothing behind. `make fuzz`
# raises the number of examples (TOKEN_RESOURCE_EXAMPLES).
BOUNDED = settings(
    max_examples=int(os.environ.get("TOKEN_RESOURCE_EXAMPLES", "200")),
    deadline=None,
    database=None,
)

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


# A tiny TOML writer, independent of the code under test.


def toml_string(text: str) -> str:
    def escape(char: str) -> str:
        if char in '"\\':
            return "\\" + char
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return f"\\u{ord(char):04x}"
        return char

    return '"' + "".join(map(escape, text)) + '"'


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: object) -> str:  # noqa: PLR0911 - one return per TOML type
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_document(table: Mapping[str, object], *, inline: bool, header: Sequence[str] = ()) -> str:
    """Tables as `[a.b]` sections, or (inline=True) as inline tables below the top level."""
    lines = [
        f"{toml_key(key)} = {toml_value(value)}"
        for key, value in table.items()
        if (inline and header) or not isinstance(value, dict)
    ]
    for key, value in table.items():
        if isinstance(value, dict) and not (inline and header):
            path = [*header, key]
            lines.append("[" + ".".join(map(toml_key, path)) + "]")
            lines.append(toml_document(value, inline=inline, header=path))
    return "\n".join(lines)


# Strategies: valid configurations

domains = st.from_regex(
    r"[a-z0-9](?:[-a-z0-9]{0,8}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,8}[a-z0-9])?){0,2}",
    fullmatch=True,
).filter(lambda domain: not domain.endswith("kubernetes.io"))
name_parts = st.from_regex(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?", fullmatch=True)
resource_names = st.builds("{}/{}".format, domains, name_parts).filter(
    lambda name: not name.startswith("requests.")
)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
# name -> (count, env override or None)
resource_tables = st.dictionaries(
    resource_names,
    st.tuples(st.integers(min_value=0, max_value=MAX_COUNT), st.none() | env_names),
    max_size=5,
)

# Strategies: arbitrary documents

schema_keys = st.sampled_from(
    ["agent", "resources", "count", "env", "device_plugin_dir", "kubernetes", "advertise"]
)
name_keys = st.sampled_from(
    ["example.com/token", "acme/x", "a.b/c", "a-b/c", "requests.x/y", "kubernetes.io/x"]
)
keys = schema_keys | name_keys | st.text(max_size=12)
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-5, max_value=MAX_COUNT + 5),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.dates(),
    st.sampled_from(["/var/lib/x", "relative", "", "ENV_NAME", "1BAD"]),
    st.text(max_size=20),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=20,
)
generated_documents = st.builds(
    lambda table, inline: toml_document(table, inline=inline),
    st.dictionaries(keys, values, max_size=4),
    st.booleans(),
)
toml_lines = st.sampled_from(
    ["[resources]", "[agent]", '[resources."example.com/token"]', '"example.com/token" = 1']
)
toml_tokens = st.sampled_from(
    ["count = ", "env = ", "device_plugin_dir = ", "'", '"', "[", "]", "{", "}", "=", ".", ","]
)
odd_tokens = st.sampled_from(
    ["\n", "\r\n", " ", "#", "1", "-1", "true", "1.5", '"/abs"', '"\\u0000"', "\\", "\x00"]
)
# Documents shaped like configurations, to reach the validation behind the key checks.
schema_documents = st.builds(
    lambda agent, resources, inline: toml_document(
        {"agent": agent, "resources": resources}, inline=inline
    ),
    st.dictionaries(st.just("device_plugin_dir") | keys, values, max_size=2),
    st.dictionaries(
        resource_names | keys, values | st.dictionaries(schema_keys, values, max_size=3), max_size=4
    ),
    st.booleans(),
)
texts = st.one_of(
    schema_documents,
    generated_documents,
    st.text(max_size=200),
    st.lists(toml_lines | toml_tokens | odd_tokens, max_size=30).map("".join),
)


def paths(count: int) -> list[Path]:
    return [Path("/etc/token-resource.toml")] + [
        Path(f"/etc/token-resource.d/{n:02}.toml") for n in range(1, count)
    ]


def resources_document(resources: Mapping[str, tuple[int, str | None]], *, inline: bool) -> str:
    table = {
        name: count if env is None else {"count": count, "env": env}
        for name, (count, env) in resources.items()
    }
    return toml_document({"resources": table}, inline=inline)


def effective(table: Mapping[str, tuple[int, str | None]]) -> dict[str, tuple[int, str]]:
    return {name: (count, env or default_env_name(name)) for name, (count, env) in table.items()}


def parse_valid(tables: Sequence[Mapping[str, tuple[int, str | None]]], *, inline: bool) -> Config:
    documents = [
        (path, resources_document(table, inline=inline))
        for path, table in zip(paths(len(tables)), tables)
    ]
    envs_set = {name: env for table in tables for name, (_, env) in table.items() if env}
    names = {name for table in tables for name in table}
    envs = [envs_set.get(name, default_env_name(name)) for name in names]
    assume(len(set(envs)) == len(envs))
    return parse_config(documents)


# Properties


def parse_or_error(documents: Sequence[tuple[Path, str]]) -> Config | ConfigError:
    try:
        return parse_config(documents)
    except ConfigError as error:
        return error


@BOUNDED
@given(st.lists(texts, min_size=1, max_size=3))
def test_any_documents_give_a_config_or_a_config_error(documents: list[str]) -> None:
    named = dict(zip(paths(len(documents)), documents))
    result = parse_or_error(list(named.items()))
    if isinstance(result, ConfigError):
        assert result.file in named
        assert str(result).startswith(str(result.file))
        assert "\n" not in str(result)
        assert result.line is None or 1 <= result.line <= named[result.file].count("\n") + 1
    else:
        assert list(result.resources) == sorted(result.resources)
        assert all(0 <= spec.count <= MAX_COUNT for spec in result.resources.values())
        assert len({spec.env for spec in result.resources.values()}) == len(result.resources)


@BOUNDED
@given(st.lists(resource_tables, min_size=1, max_size=3), st.booleans())
def test_valid_configs_round_trip_with_later_files_winning(
    tables: list[dict[str, tuple[int, str | None]]], inline: bool
) -> None:
    config = parse_valid(tables, inline=inline)
    # Key by key: the last count, the last env any file set (else the default), the last file.
    counts: dict[str, int] = {}
    envs: dict[str, str] = {}
    sources: dict[str, Path] = {}
    for path, table in zip(paths(len(tables)), tables):
        for name, (count, env) in table.items():
            counts[name], sources[name] = count, path
            if env is not None:
                envs[name] = env
    expected = {
        name: (count, envs.get(name, default_env_name(name)), sources[name])
        for name, count in counts.items()
    }
    assert {
        name: (spec.count, spec.env, spec.source) for name, spec in config.resources.items()
    } == expected


@BOUNDED
@given(resource_tables, resource_tables)
def test_diff_partitions_the_resource_names(
    old_table: dict[str, tuple[int, str | None]], new_table: dict[str, tuple[int, str | None]]
) -> None:
    diff = diff_configs(
        parse_valid([old_table], inline=False), parse_valid([new_table], inline=True)
    )
    before, after = effective(old_table), effective(new_table)
    common = before.keys() & after.keys()
    assert [s.name for s in diff.added] == sorted(after.keys() - before.keys())
    assert [s.name for s in diff.removed] == sorted(before.keys() - after.keys())
    assert [s.name for s in diff.unchanged] == sorted(n for n in common if before[n] == after[n])
    assert [old.name for old, _ in diff.changed] == sorted(
        n for n in common if before[n] != after[n]
    )
    assert diff.empty == (before == after)
