"""Field errors as the real server reports them (apimachinery util/validation/field: ``Error``,
``ErrorBody``; api/errors ``NewInvalid``) and the DNS name checks every validation reuses
(util/validation ``IsDNS1123Subdomain``, ``IsDNS1123Label``, in their "characters" words).
validation.py and placement.py build on them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.standin.apiserver.wire import Fail, fail

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS_LABEL = re.compile(_LABEL)
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


@dataclass(frozen=True)
class FieldError:
    """One entry of a field.ErrorList."""

    field: str
    kind: str  # "Invalid value", "Required value", "Duplicate value", "Too long", "Too many",
    # "Unsupported value"
    value: Any = None
    detail: str = ""
    show_value: bool = True

    def body(self) -> str:
        text = self.kind
        if self.show_value:
            text += f": {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "Invalid value", value, detail)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(field, "Required value", detail=detail, show_value=False)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(field, "Forbidden", detail=detail, show_value=False)


def too_long(field: str, limit: int) -> FieldError:
    detail = f"may not be more than {limit} bytes"
    return FieldError(field, "Too long", detail=detail, show_value=False)


def go_value(value: Any) -> str:
    """How field.Error prints a bad value: strings quoted, numbers bare, nil as null, anything
    else as Go's json.Marshal writes it (no spaces)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "null" if value is None else json.dumps(value, separators=(",", ":"))


_REASONS = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Duplicate value": "FieldValueDuplicate",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
}


def invalid_object(kind: str, group: str, name: str, errors: list[FieldError]) -> Fail:
    """apimachinery's errors.NewInvalid: 422 with every error as a cause."""
    qualified = f"{kind}.{group}" if group else kind
    shown = str(errors[0]) if len(errors) == 1 else f"[{', '.join(map(str, errors))}]"
    causes = [
        {"reason": _REASONS[error.kind], "message": error.body(), "field": error.field}
        for error in errors
    ]
    details = {"name": name, "group": group, "kind": kind, "causes": causes}
    return fail(422, "Invalid", f'{qualified} "{name}" is invalid: {shown}', details)


def subdomain(value: str, field: str) -> list[FieldError]:
    """IsDNS1123Subdomain."""
    errors = []
    if len(value) > 253:
        errors.append(invalid(field, value, "must be no more than 253 characters"))
    if not _SUBDOMAIN.fullmatch(value):
        errors.append(invalid(field, value, _SUBDOMAIN_MESSAGE))
    return errors


def dns_label(value: str, field: str) -> list[FieldError]:
    """IsDNS1123Label."""
    errors = []
    if len(value) > 63:
        errors.append(invalid(field, value, "must be no more than 63 characters"))
    if not _DNS_LABEL.fullmatch(value):
        errors.append(invalid(field, value, _LABEL_MESSAGE))
    return errors
