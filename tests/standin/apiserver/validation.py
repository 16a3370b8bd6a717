"""Field validation of resource.k8s.io/v1 objects as the real server does it, with its field
paths and words (pkg/apis/resource/validation/validation.go: ``ValidateResourceSlice``,
``validateResourceSliceSpec``, ``validateResourcePool``, ``validatePoolName``,
``validateDevice``, ``validateDeviceAttribute``, ``validateQualifiedName``; the driver name is
``corevalidation.ValidateCSIDriverName``: at most 63 characters, a DNS subdomain once
lowercased). Errors become one 422 ``Invalid`` status (apimachinery errors.NewInvalid,
fielderrors.py): the message ``ResourceSlice.resource.k8s.io "<name>" is invalid: <error>``
(several errors in ``[..., ...]``), each error also a cause with its ``field``. Where the
slice and its devices are available (``nodeName``, ``nodeSelector``, ``allNodes``,
``perDeviceNodeSelection``): placement.py.

Limits (pkg/apis/resource/types.go): 128 devices per slice, 32 attributes plus capacities per
device, attribute names ``<C identifier>`` or ``<DNS subdomain>/<C identifier>`` (domain at
most 63, identifier at most 32), string and version values at most 64, pool names at most 253
made of DNS subdomains joined by ``/``.

Device taints (``validateDeviceTaint``, ``haveDeviceTaints``; k8s.io/api resource/v1
types.go of 1.36: ``DeviceTaintsMaxLength``, ``ResourceSliceMaxDevicesWithAdvancedFeatures``):
at most 16 per device; a slice in which any device has one holds at most 64 devices; ``key``
a label key (``metav1validation.ValidateLabelName``: labels.py), ``value`` empty or a label
value, ``effect`` required and one of None, NoSchedule, NoExecute. On an update a device
whose taints equal those of the stored device of that name is not checked again.
``timeAdded`` is the decoder's (taints.py). Not checked: shared counters and the 64-device
limit they (and list-type attributes) also set, consumable capacity's request policies (the
agent uses none of them).
"""

from __future__ import annotations

import re
from typing import Any

from tests.standin.apiserver.fielderrors import (
    FieldError,
    dns_label,
    invalid,
    invalid_object,
    required,
    subdomain,
    too_long,
)
from tests.standin.apiserver.labels import label_key_errors, label_value_errors
from tests.standin.apiserver.placement import device_placement, slice_placement
from tests.standin.apiserver.quantities import canonical_quantity

# The field-error primitives moved to fielderrors.py; callers still reach them here.
__all__ = [
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_DEVICES",
    "MAX_DEVICES_WITH_TAINTS",
    "MAX_DRIVER_LENGTH",
    "MAX_ID_LENGTH",
    "MAX_POOL_NAME_LENGTH",
    "MAX_TAINTS",
    "MAX_VALUE_LENGTH",
    "TAINT_EFFECTS",
    "FieldError",
    "device_taints",
    "dns_label",
    "driver_name",
    "invalid",
    "invalid_object",
    "object_name",
    "required",
    "resource_slice",
    "subdomain",
    "too_long",
]

MAX_DEVICES = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_DRIVER_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_VALUE_LENGTH = 64
MAX_POOL_NAME_LENGTH = 253
MAX_TAINTS = 16
MAX_DEVICES_WITH_TAINTS = 64
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")  # in the order sets.List gives them
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = r"(0|[1-9]\d*)"
_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(
    rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}(-{_PRE}(\.{_PRE})*)?(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
_C_IDENTIFIER_MESSAGE = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used "
    "for validation is '[A-Za-z_][A-Za-z0-9_]*')"
)


def driver_name(value: Any, field: str) -> list[FieldError]:
    """ValidateCSIDriverName, which DRA reuses: upper case passes (with a warning)."""
    value = value if isinstance(value, str) else ""
    errors = [] if value else [required(field)]
    if len(value) > MAX_DRIVER_LENGTH:
        errors.append(
            FieldError(field, "Too long", detail="may not be more than 63 bytes", show_value=False)
        )
    return errors + (subdomain(value.lower(), field) if value else [])


def object_name(metadata: dict[str, Any], field: str = "metadata.name") -> list[FieldError]:
    name = metadata.get("name")
    if not name:
        return [required(field, "name or generateName is required")]
    return subdomain(name, field)


def resource_slice(spec: Any, old: dict[str, Any] | None = None) -> list[FieldError]:
    """validateResourceSliceSpec (``old``: the stored spec, for an update)."""
    spec = spec if isinstance(spec, dict) else {}
    errors = driver_name(spec.get("driver"), "spec.driver")
    pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else {}
    errors += _pool(pool)
    if old is not None:
        for field, new_value, old_value in (
            ("spec.pool.name", pool.get("name"), (old.get("pool") or {}).get("name")),
            ("spec.driver", spec.get("driver"), old.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old.get("nodeName")),
        ):
            if new_value != old_value:
                errors.append(invalid(field, new_value, "field is immutable"))
    errors += slice_placement(spec)
    per_device = spec.get("perDeviceNodeSelection") is True
    devices = [device if isinstance(device, dict) else {} for device in spec.get("devices") or []]
    tainted = any(device.get("taints") for device in devices)  # haveDeviceTaints
    limit = MAX_DEVICES_WITH_TAINTS if tainted else MAX_DEVICES
    if len(devices) > limit:
        detail = f"must have at most {limit} items"
        return [*errors, FieldError("spec.devices", "Too many", len(devices), detail)]
    stored: dict[Any, Any] = {}  # lookupDevice: the first stored device of each name
    for device in (old or {}).get("devices") or []:
        if isinstance(device, dict):
            stored.setdefault(device.get("name"), device.get("taints") or [])
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = f"spec.devices[{index}]"
        errors += _device(device, path)
        name = device.get("name")
        if old is None or name not in stored or stored[name] != (device.get("taints") or []):
            errors += device_taints(device.get("taints"), f"{path}.taints")
        errors += device_placement(device, path, per_device)
        if isinstance(name, str) and name in seen:
            errors.append(FieldError(f"spec.devices[{index}]", "Duplicate value", name))
        seen.add(name if isinstance(name, str) else "")
    return errors


def _pool(pool: dict[str, Any]) -> list[FieldError]:
    """validateResourcePool and validatePoolName."""
    errors: list[FieldError] = []
    name = pool.get("name") if isinstance(pool.get("name"), str) else ""
    if not name:
        errors.append(required("spec.pool.name"))
    else:
        if len(name) > MAX_POOL_NAME_LENGTH:
            errors.append(too_long("spec.pool.name", MAX_POOL_NAME_LENGTH))
        for part in name.split("/"):
            errors += subdomain(part, "spec.pool.name")
    count = pool.get("resourceSliceCount", 0)
    if not isinstance(count, int) or count <= 0:
        errors.append(invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or generation < 0:
        detail = "must be greater than or equal to zero"
        errors.append(invalid("spec.pool.generation", generation, detail))
    return errors


def _device(device: dict[str, Any], path: str) -> list[FieldError]:
    """validateDevice: a DNS label name, at most 32 attributes and capacities together."""
    name = device.get("name") if isinstance(device.get("name"), str) else ""
    errors = dns_label(name, f"{path}.name") if name else [required(f"{path}.name")]
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        limit = MAX_ATTRIBUTES_AND_CAPACITIES
        detail = f"the total number of attributes and capacities must not exceed {limit}"
        errors.append(invalid(path, total, detail))
    for key, value in attributes.items():
        field = f"{path}.attributes[{key}]"
        errors += _qualified_name(key, field) + _attribute(value, field)
    for key, value in capacity.items():
        field = f"{path}.capacity[{key}]"
        errors += _qualified_name(key, field)
        quantity = value.get("value") if isinstance(value, dict) else None
        if canonical_quantity(quantity) is None:
            detail = (
                "quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
            errors.append(invalid(f"{field}.value", quantity, detail))
    return errors


def _qualified_name(name: str, field: str) -> list[FieldError]:
    """validateQualifiedName: ``<C identifier>`` or ``<domain>/<C identifier>``."""
    parts = name.split("/")
    if len(parts) == 1:
        return _c_identifier(parts[0], field)
    errors: list[FieldError] = []
    if not parts[0]:
        errors.append(invalid(field, "", "the domain must not be empty"))
    else:
        errors += driver_name(parts[0], field)
    if not parts[1]:
        errors.append(invalid(field, "", "the name must not be empty"))
    else:
        errors += _c_identifier(parts[1], field)
    return errors


def _c_identifier(value: str, field: str) -> list[FieldError]:
    errors = [too_long(field, MAX_ID_LENGTH)] if len(value) > MAX_ID_LENGTH else []
    if not _C_IDENTIFIER.fullmatch(value):
        errors.append(invalid(field, value, _C_IDENTIFIER_MESSAGE))
    return errors


def _attribute(value: Any, field: str) -> list[FieldError]:
    """validateDeviceAttribute: exactly one of int, bool, string, version."""
    value = value if isinstance(value, dict) else {}
    present = [key for key in ("int", "bool", "string", "version") if value.get(key) is not None]
    errors: list[FieldError] = []
    for key in ("string", "version"):
        text = value.get(key)
        if text is None:
            continue
        if key == "version" and not _SEMVER.fullmatch(str(text)):
            detail = "must be a string compatible with semver.org spec 2.0.0"
            errors.append(invalid(f"{field}.version", text, detail))
        if len(str(text)) > MAX_VALUE_LENGTH:
            errors.append(too_long(f"{field}.{key}", MAX_VALUE_LENGTH))
    if not present:
        errors.append(invalid(field, "", "exactly one value must be specified"))
    elif len(present) > 1:
        errors.append(invalid(field, value, "exactly one value must be specified"))
    return errors


def device_taints(taints: Any, path: str) -> list[FieldError]:
    """validateSlice of a device's taints (at most 16) with validateDeviceTaint."""
    taints = taints if isinstance(taints, list) else []
    if len(taints) > MAX_TAINTS:
        return [FieldError(path, "Too many", len(taints), f"must have at most {MAX_TAINTS} items")]
    errors: list[FieldError] = []
    for index, given in enumerate(taints):
        taint = given if isinstance(given, dict) else {}
        field = f"{path}[{index}]"
        key = _text(taint.get("key"))  # ValidateLabelName, which requires it
        errors += [invalid(f"{field}.key", key, error) for error in label_key_errors(key)]
        value = _text(taint.get("value"))
        if value:  # validateLabelValue, only for a non-empty value
            errors += [invalid(f"{field}.value", value, e) for e in label_value_errors(value)]
        effect = _text(taint.get("effect"))
        if not effect:
            errors.append(required(f"{field}.effect"))
        elif effect not in TAINT_EFFECTS:
            detail = "supported values: " + ", ".join(f'"{known}"' for known in TAINT_EFFECTS)
            errors.append(FieldError(f"{field}.effect", "Unsupported value", effect, detail))
    return errors


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
