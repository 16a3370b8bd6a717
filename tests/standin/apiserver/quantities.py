"""Kubernetes quantities as the API server stores them (resource.Quantity's canonical form)."""

from __future__ import annotations

import json
import re
from decimal import ROUND_UP, Decimal, InvalidOperation

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T"}
_DECIMAL_SUFFIXES.update({15: "P", 18: "E"})
_DECIMAL_EXPONENTS = {suffix: exponent for exponent, suffix in _DECIMAL_SUFFIXES.items()}


def canonical_quantity(value: object) -> str | None:
    """A quantity as the API server stores it (``"1000"`` → ``"1k"``), None if invalid.

    Like resource.Quantity: the suffix family of the input is kept (binary, decimal SI or
    decimal exponent) and the largest suffix that keeps the number whole is chosen;
    fractions become milli, micro or nano units, rounded up to a nano.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    try:
        number = Decimal(match["sign"] + match["number"])
    except InvalidOperation:
        return None
    if match["binary"]:
        number *= 1024 ** _BINARY_SUFFIXES.index(match["binary"])
        return _binary(number) if abs(number) >= 1024 else _decimal(number, exponent_form=False)
    if match["decimal"]:
        number = number.scaleb(_DECIMAL_EXPONENTS[match["decimal"]])
    elif match["exponent"] is not None:
        number = number.scaleb(int(match["exponent"]))
        return _decimal(number, exponent_form=True)
    return _decimal(number, exponent_form=False)


def _binary(number: Decimal) -> str:
    if number != number.to_integral_value():
        return _decimal(number, exponent_form=False)
    whole, index = int(number), 0
    while whole % 1024 == 0 and index < len(_BINARY_SUFFIXES) - 1:
        whole //= 1024
        index += 1
    return f"{whole}{_BINARY_SUFFIXES[index]}"


def _decimal(number: Decimal, *, exponent_form: bool) -> str:
    if number == 0:
        return "0"
    exponent = 0
    # Fractions: milli, micro, nano; anything finer rounds up (away from zero) to a nano.
    while number != number.to_integral_value() and exponent > -9:
        number = number.scaleb(3)
        exponent -= 3
    if number != number.to_integral_value():
        number = number.to_integral_value(rounding=ROUND_UP)
    whole = int(number)
    while whole % 1000 == 0 and exponent < 18:
        whole //= 1000
        exponent += 3
    if exponent_form:
        return f"{whole}e{exponent}" if exponent else str(whole)
    return f"{whole}{_DECIMAL_SUFFIXES[exponent]}"
