"""metav1.MicroTime as the API server decodes and encodes it (k8s.io/apimachinery
pkg/apis/meta/v1/micro_time.go: ``UnmarshalJSON`` is Go's ``time.Parse`` with
``RFC3339Micro``, ``MarshalJSON`` formats the time in UTC with that layout).

The layout ``2006-01-02T15:04:05.000000Z07:00`` wants exactly six digits of fraction, so
``2026-01-02T03:04:05Z`` (no fraction) and ``...05.123Z`` are refused: Go's ``time.Parse``
(src/time/format.go) walks the layout element by element, and the error names the first
element the rest of the value does not fit (``cannot parse "Z" as ".000000"``), a value out of
range (``month out of range``) or text left over (``extra text``). Modelled here for this one
layout only.
"""

from __future__ import annotations

import datetime
import json

RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"
# (literal before the element, the element, its digits, whether fixed width, range name, max)
_ELEMENTS = (
    ("", "2006", 4, True, "", 9999),
    ("-", "01", 2, True, "month", 12),
    ("-", "02", 2, True, "", 99),  # the day is checked against the month at the end
    ("T", "15", 2, False, "hour", 23),
    (":", "04", 2, True, "minute", 59),
    (":", "05", 2, True, "second", 59),
)


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _cannot_parse(value: str, rest: str, element: str) -> ValueError:
    return ValueError(
        f"parsing time {_quote(value)} as {_quote(RFC3339_MICRO)}: cannot parse "
        f"{_quote(rest)} as {_quote(element)}"
    )


def _out_of_range(value: str, what: str) -> ValueError:
    return ValueError(f"parsing time {_quote(value)}: {what} out of range")


def _number(rest: str, digits: int, fixed: bool) -> tuple[int, str] | None:
    """Go's getnum (one or two digits, two when fixed) and the year's four digits."""
    if digits == 4:
        return (int(rest[:4]), rest[4:]) if len(rest) >= 4 and rest[:4].isdigit() else None
    if not rest[:1].isdigit():
        return None
    if not rest[1:2].isdigit():
        return None if fixed else (int(rest[0]), rest[1:])
    return int(rest[:2]), rest[2:]


def parse_micro_time(value: str) -> datetime.datetime:
    """The time ``value`` names (aware, UTC); ValueError with Go's words if it does not fit."""
    rest = value
    numbers = []
    for literal, element, digits, fixed, name, maximum in _ELEMENTS:
        if literal:
            if not rest.startswith(literal):
                raise _cannot_parse(value, rest, literal)
            rest = rest[len(literal) :]
        parsed = _number(rest, digits, fixed)
        if parsed is None:
            raise _cannot_parse(value, rest, element)
        number, rest = parsed
        if name and (number > maximum or (name == "month" and number < 1)):
            raise _out_of_range(value, name)
        numbers.append(number)
    fraction = rest[1:7]
    if len(rest) < 7 or rest[0] not in ".," or not fraction.isdigit():
        raise _cannot_parse(value, rest, ".000000")
    rest = rest[7:]
    if rest.startswith("Z"):
        offset, rest = 0, rest[1:]
    else:
        zone = rest[:6]
        if (
            len(zone) < 6
            or zone[0] not in "+-"
            or zone[3] != ":"
            or not (zone[1:3] + zone[4:6]).isdigit()
        ):
            raise _cannot_parse(value, rest, "Z07:00")
        minutes = int(zone[1:3]) * 60 + int(zone[4:6])
        offset, rest = (minutes if zone[0] == "+" else -minutes), rest[6:]
    if rest:
        raise ValueError(f"parsing time {_quote(value)}: extra text: {_quote(rest)}")
    year, month, day, hour, minute, second = numbers
    try:
        local = datetime.datetime(
            year,
            month,
            day,
            hour,
            minute,
            second,
            int(fraction),
            tzinfo=datetime.timezone(datetime.timedelta(minutes=offset)),
        )
    except ValueError:  # day 0, 31 April, 29 February of a common year (or year 0)
        raise _out_of_range(value, "day") from None
    return local.astimezone(datetime.timezone.utc)


def format_micro_time(moment: datetime.datetime) -> str:
    """MarshalJSON: in UTC, six digits of fraction, ``Z``."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
