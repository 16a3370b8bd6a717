"""Label keys and values as apimachinery 1.36 checks them, in its words: the messages of
``pkg/api/validate/content`` (kube.go ``IsLabelKey``, ``IsLabelValue``; dns.go
``IsDNS1123Subdomain``; errors.go ``MaxLenError``, ``EmptyError``, ``RegexError``), whose
lengths are in bytes ("must be no more than 63 bytes"; the older ``util/validation`` that the
driver name still goes through says "characters"). Each function returns the messages that
``field.Invalid`` wraps, as the Go functions do.
"""

from __future__ import annotations

import re

LABEL_MAX_LENGTH = 63
SUBDOMAIN_MAX_LENGTH = 253
_LABEL_KEY = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_KEY_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def label_key_errors(value: str) -> list[str]:
    """IsLabelKey: an optional DNS subdomain prefix and ``/``, then a name of at most 63."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a valid label key {_LABEL_KEY_MESSAGE} with an optional DNS subdomain prefix and "
            "'/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {error}" for error in subdomain_errors(parts[0])]
    name = parts[-1]
    if not name:
        errors.append("name part must be non-empty")
    elif size(name) > LABEL_MAX_LENGTH:
        errors.append(f"name part must be no more than {LABEL_MAX_LENGTH} bytes")
    if not _LABEL_KEY.fullmatch(name):
        errors.append(f"name part {_LABEL_KEY_MESSAGE}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """IsLabelValue: empty, or at most 63 of what a label key's name may hold."""
    errors = []
    if size(value) > LABEL_MAX_LENGTH:
        errors.append(f"must be no more than {LABEL_MAX_LENGTH} bytes")
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(_LABEL_VALUE_MESSAGE)
    return errors


def subdomain_errors(value: str) -> list[str]:
    """content.IsDNS1123Subdomain."""
    errors = []
    if size(value) > SUBDOMAIN_MAX_LENGTH:
        errors.append(f"must be no more than {SUBDOMAIN_MAX_LENGTH} bytes")
    if not _SUBDOMAIN.fullmatch(value):
        errors.append(_SUBDOMAIN_MESSAGE)
    return errors


def size(text: str) -> int:
    """Go's len(): bytes of UTF-8."""
    return len(text.encode("utf-8", "surrogatepass"))
