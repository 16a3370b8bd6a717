"""Configuration errors that name the file, the line and the key, and the helpers that find them.

tomllib reports where the TOML itself is broken, but not where a valid key holds a bad value:
find_line looks for the line that defines a key path, so every error can point at it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from token_resource._compat import tomllib

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED_KEY = rf"{_KEY_PART}(?:[ \t]*\.[ \t]*{_KEY_PART})*"
_TABLE_HEADER = re.compile(rf"[ \t]*\[\[?[ \t]*({_DOTTED_KEY})[ \t]*\]")
_KEY_VALUE = re.compile(rf"[ \t]*({_DOTTED_KEY})[ \t]*=")
_CONTAINER_NAMES: Mapping[type, str] = {list: "an array", dict: "a table"}


class ConfigError(Exception):
    """A configuration the agent cannot use, explained in one operator-readable paragraph.

    str(error) names the file, the line (where known) and the dotted key path, then the reason.
    """

    def __init__(
        self,
        reason: str,
        *,
        file: Path | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.key = key
        self.line = line
        self.reason = reason
        location = [
            *([str(file)] if file is not None else []),
            *([f"line {line}"] if line is not None else []),
            *([f"key {key}"] if key is not None else []),
        ]
        super().__init__(f"{', '.join(location)}: {reason}" if location else reason)


class Invalid(Exception):
    """A validation failure inside one document, before its file and line are attached."""

    def __init__(self, key_path: tuple[str, ...], reason: str) -> None:
        super().__init__(reason)
        self.key_path = key_path
        self.reason = reason


def located(error: Invalid, path: Path, text: str) -> ConfigError:
    return ConfigError(
        error.reason,
        file=path,
        key=format_key(error.key_path),
        line=find_line(text, error.key_path),
    )


def os_reason(error: OSError) -> str:
    return error.strerror or str(error)


def quote(text: str) -> str:
    # A TOML basic string: escapes control characters, so messages stay on one line.
    return json.dumps(text, ensure_ascii=False)


def format_key(key_path: tuple[str, ...]) -> str:
    return ".".join(part if _BARE_KEY.fullmatch(part) else quote(part) for part in key_path)


def describe_value(value: object) -> str:
    """A value as a message shows it, in TOML spelling where it has one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    return _CONTAINER_NAMES.get(type(value), f"a {type(value).__name__}")


def find_line(text: str, key_path: tuple[str, ...]) -> int | None:
    """Best-effort line number of key_path's definition, which tomllib does not report.

    Falls back to the nearest enclosing key that can be found, e.g. to the resource itself for
    a key inside an inline table.
    """
    for length in range(len(key_path), 0, -1):
        line = _first_line_defining(text, key_path[:length])
        if line is not None:
            return line
    return None


def _first_line_defining(text: str, key_path: tuple[str, ...]) -> int | None:
    """The first `[table]` header or `key = ` line that defines key_path or a key inside it."""
    table: tuple[str, ...] | None = ()  # None: under a header that could not be read
    for number, line in enumerate(text.split("\n"), start=1):
        header = _TABLE_HEADER.match(line)
        if header:
            table = defined = _split_key(header[1])
        else:
            assignment = _KEY_VALUE.match(line)
            key = _split_key(assignment[1]) if assignment else None
            defined = table + key if table is not None and key is not None else None
        if defined is not None and defined[: len(key_path)] == key_path:
            return number
    return None


def _split_key(dotted_key: str) -> tuple[str, ...] | None:
    # tomllib unquotes and unescapes the parts, so TOML's string rules live in one place.
    try:
        node: object = tomllib.loads(f"{dotted_key} = 0")
    except tomllib.TOMLDecodeError:
        return None
    parts: list[str] = []
    while isinstance(node, dict):
        key, node = next(iter(node.items()))
        parts.append(key)
    return tuple(parts)
