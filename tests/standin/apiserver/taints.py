"""What a 1.36 API server does to the taints of a ResourceSlice's devices before it validates
them (validation.py checks what is left):

- Decoding: ``timeAdded`` is a ``*metav1.Time``; its UnmarshalJSON (apimachinery
  pkg/apis/meta/v1/time.go) takes ``null`` as unset and anything else through
  ``time.Parse(time.RFC3339, ...)``, so a bad one fails the decoding of the whole body:
  400 BadRequest ``ResourceSlice in version "v1" cannot be handled as a ResourceSlice:
  <Go's error>`` (apiserver handlers/rest.go ``transformDecodeError``), before admission and
  validation and whether DRADeviceTaints is on or not. Go's parser and its words are
  :func:`parse_time` (go/src/time/format.go ``parse``: one-digit hours, ``,`` or ``.``
  fractions, offsets up to 24:60 pass). In a PATCH the patched object fails to decode:
  422 Invalid with one cause for the field ``patch`` (apiserver handlers/patch.go,
  ``applyPatchToCurrentObject``; the value shown is the stand-in's JSON of the patched
  object, not Go's byte for byte).
- Storing: MarshalJSON writes the time in UTC to the second (``2026-12-02T09:00:00Z``), and
  protobuf keeps seconds only (time_proto.go), so that is what is stored and returned. An
  empty ``taints`` list is omitted (``omitempty``).
- Defaulting (pkg/apis/resource/v1/defaults.go ``SetDefaults_DeviceTaint``): a taint without
  ``timeAdded`` gets the current time, truncated to the second, at every create and update
  (a PUT that leaves it out re-stamps the taint, and changes the spec).
- The strategy (pkg/registry/resource/resourceslice/strategy.go ``dropDisabledFields``,
  ``dropDisabledDRADeviceTaintsFields``): with the DRADeviceTaints gate off, every device's
  ``taints`` is dropped without a word, on create and on update, unless the stored slice
  already has a device with taints (``draDeviceTaintsFeatureInUse``). PrepareForUpdate
  compares the specs for ``metadata.generation`` before it drops them.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

from tests.standin.apiserver.validation import invalid, invalid_object
from tests.standin.apiserver.wire import fail

LAYOUT = "2006-01-02T15:04:05Z07:00"  # time.RFC3339
ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, which MarshalJSON writes as null
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class TimeError(ValueError):
    """A time.ParseError, with Go's Error() text."""


def decode(document: dict[str, Any], *, patched: bool = False) -> None:
    """Decode and default the taints of a ResourceSlice body in place, or raise the real
    server's error (``patched``: the object is the result of a PATCH)."""
    spec = document.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for device in devices if isinstance(devices, list) else []:
        taints = device.get("taints") if isinstance(device, dict) else None
        if isinstance(device, dict) and "taints" in device and not taints:
            del device["taints"]  # omitempty
        for taint in taints if isinstance(taints, list) else []:
            if not isinstance(taint, dict):
                continue
            given = taint.get("timeAdded")
            try:
                taint["timeAdded"] = _now() if given is None else unmarshal_time(given)
            except TimeError as error:
                raise _undecodable(document, str(error), patched) from None


def drop_disabled(spec: Any, old_spec: Any, *, enabled: bool) -> None:
    """dropDisabledDRADeviceTaintsFields on ``spec`` in place (``old_spec``: the stored spec,
    for an update)."""
    if enabled or has_taints(old_spec) or not isinstance(spec, dict):
        return
    for device in spec.get("devices") or []:
        if isinstance(device, dict):
            device.pop("taints", None)


def has_taints(spec: Any) -> bool:
    """draDeviceTaintsFeatureInUse (and validation's haveDeviceTaints)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return any(
        isinstance(device, dict) and device.get("taints")
        for device in (devices if isinstance(devices, list) else [])
    )


def unmarshal_time(value: Any) -> str | None:
    """metav1.Time's UnmarshalJSON, then what storage keeps and MarshalJSON writes: UTC to
    the second, and ``null`` for the zero time; TimeError if Go's decoding fails."""
    if not isinstance(value, str):  # json.Unmarshal into a string
        kinds = ((bool, "bool"), ((int, float), "number"), (dict, "object"), (list, "array"))
        kind = next(kind for types, kind in kinds if isinstance(value, types))
        raise TimeError(f"json: cannot unmarshal {kind} into Go value of type string")
    year, month, day, hour, minute, second, offset = parse_time(value)
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    stored = _format_utc(seconds - offset)
    return None if stored == ZERO_TIME else stored


def parse_time(value: str) -> tuple[int, int, int, int, int, int, int]:
    """Go's ``time.Parse(time.RFC3339, value)`` as year, month, day, hour, minute, second and
    the zone offset in seconds (fractions are read and dropped); TimeError with Go's words.
    Go walks bytes, so this does too."""
    text = value.encode("utf-8", "surrogatepass")
    rest = text

    def bad(layout_element: str, value_element: bytes) -> TimeError:
        return TimeError(
            f"parsing time {_quote(text)} as {_quote(LAYOUT.encode())}: cannot parse "
            f"{_quote(value_element)} as {_quote(layout_element.encode())}"
        )

    def out_of_range(what: str) -> TimeError:
        return TimeError(f"parsing time {_quote(text)}: {what} out of range")

    def skip(literal: str) -> None:
        nonlocal rest
        if not rest.startswith(literal.encode()):
            raise bad(literal, rest)
        rest = rest[1:]

    def number(element: str, fixed: bool) -> int:  # getnum
        nonlocal rest
        if not rest[:1].isdigit() or (fixed and not rest[1:2].isdigit()):
            raise bad(element, rest)
        width = 2 if rest[1:2].isdigit() else 1
        result, rest = int(rest[:width]), rest[width:]
        return result

    if len(rest) < 4 or not rest[:4].isdigit():  # stdLongYear, then atoi
        raise bad("2006", rest)
    year, rest = int(rest[:4]), rest[4:]
    skip("-")
    month = number("01", fixed=True)
    if not 1 <= month <= 12:
        raise out_of_range("month")
    skip("-")
    day = number("02", fixed=True)  # checked against the month at the end
    skip("T")
    hour = number("15", fixed=False)
    if hour >= 24:
        raise out_of_range("hour")
    skip(":")
    minute = number("04", fixed=True)
    if minute >= 60:
        raise out_of_range("minute")
    skip(":")
    second = number("05", fixed=True)
    if second >= 60:
        raise out_of_range("second")
    if len(rest) >= 2 and rest[:1] in (b".", b",") and rest[1:2].isdigit():
        digits = 2
        while rest[digits : digits + 1].isdigit():
            digits += 1
        rest = rest[digits:]
    offset = _zone(rest, bad, out_of_range)
    rest = rest[1:] if rest[:1] == b"Z" else rest[6:]
    if rest:
        raise TimeError(f"parsing time {_quote(text)}: extra text: {_quote(rest)}")
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= _DAYS[month - 1] + (1 if month == 2 and leap else 0):
        raise out_of_range("day")
    return year, month, day, hour, minute, second, offset


def _zone(
    rest: bytes,
    bad: Callable[[str, bytes], TimeError],
    out_of_range: Callable[[str], TimeError],
) -> int:
    """stdISO8601ColonTZ: ``Z`` or ``±hh:mm``, the offset in seconds."""
    if rest[:1] == b"Z":
        return 0
    if len(rest) < 6 or rest[3:4] != b":":
        raise bad("Z07:00", rest)
    hours_ok = rest[1:3].isdigit()
    hours = int(rest[1:3]) if hours_ok else 0
    minutes = int(rest[4:6]) if hours_ok and rest[4:6].isdigit() else 0
    if minutes > 60:
        raise out_of_range("time zone offset minute")
    if hours > 24:
        raise out_of_range("time zone offset hour")
    if not (hours_ok and rest[4:6].isdigit()) or rest[:1] not in (b"+", b"-"):
        raise bad("Z07:00", rest)
    offset = (hours * 60 + minutes) * 60
    return -offset if rest[:1] == b"-" else offset


def _quote(text: bytes) -> str:
    """time.quote: bytes outside printable ASCII as \\xNN, ``"`` and ``\\`` escaped."""
    shown = []
    for byte in text:
        if byte < 0x20 or byte >= 0x80:
            shown.append(f"\\x{byte:02x}")
        else:
            shown.append(("\\" if byte in b'"\\' else "") + chr(byte))
    return '"' + "".join(shown) + '"'


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, any year."""
    year -= 1 if month <= 2 else 0
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _format_utc(seconds: int) -> str:
    """Go's Format(time.RFC3339) of a UTC time (the year as Go's stdLongYear writes it)."""
    days, rest = divmod(seconds, 86400)
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted + 2) // 5 + 1
    month = shifted + (3 if shifted < 10 else -9)
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    shown_year = f"-{-year:04d}" if year < 0 else f"{year:04d}"
    hour, rest = divmod(rest, 3600)
    return f"{shown_year}-{month:02d}-{day:02d}T{hour:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def _now() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _undecodable(document: dict[str, Any], error: str, patched: bool) -> Exception:
    if patched:
        errors = [invalid("patch", json.dumps(document, separators=(",", ":")), error)]
        return invalid_object("", "", "", errors)
    return fail(
        400,
        "BadRequest",
        f'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: {error}',
    )
