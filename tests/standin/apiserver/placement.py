"""Where a ResourceSlice's devices are available, validated as 1.36 and 1.37 servers do it, with
their field paths and words (the same in both).

- The slice (pkg/apis/resource/validation/validation.go, ``validateResourceSliceSpec``):
  exactly one of ``nodeName`` (a DNS subdomain, ``validateNodeName``), ``nodeSelector`` (with
  exactly one node selector term), ``allNodes`` and ``perDeviceNodeSelection`` (each of those
  two ``true`` if set).
- Each device (``validateDevice``): under ``perDeviceNodeSelection``, exactly one of its own
  ``nodeName``, ``nodeSelector`` and ``allNodes``; without it, none of them.
- A node selector (pkg/apis/core/validation/validation.go, ``ValidateNodeSelector``,
  ``ValidateNodeSelectorTerm``, ``ValidateNodeSelectorRequirement``,
  ``ValidateNodeFieldSelectorRequirement``; DRA passes
  ``allowInvalidLabelValueInRequiredNodeAffinity=false``): at least one term; a
  ``matchExpressions`` requirement has a label key (``ValidateLabelName``: labels.py) and an
  operator with its values: ``In``/``NotIn`` one or more, ``Exists``/``DoesNotExist`` none,
  ``Gt``/``Lt`` exactly one (not checked to be a number, as on the real server), each a label
  value; a ``matchFields`` requirement only ``metadata.name`` with ``In``/``NotIn`` and one
  value, a node name.

A bad value that is a list of terms is printed as field.Error prints the internal Go structs
(json.Marshal of core.NodeSelectorTerm, which has no JSON tags: ``MatchExpressions``,
``Key``, ...).
"""

from __future__ import annotations

from typing import Any

from tests.standin.apiserver.fielderrors import FieldError, forbidden, invalid, required, subdomain
from tests.standin.apiserver.labels import label_key_errors, label_value_errors

_ONE_OF = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)
_ONE_OF_PER_DEVICE = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
)
_ONLY_PER_DEVICE = (
    "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is "
    "set to true in the ResourceSlice spec"
)
_UNSET_OR_TRUE = "must be either unset or set to true"


def slice_placement(spec: dict[str, Any]) -> list[FieldError]:
    """The placement part of validateResourceSliceSpec."""
    errors: list[FieldError] = []
    chosen = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name:
            chosen.append("`nodeName`")
            errors += subdomain(node_name, "spec.nodeName")
        else:
            detail = "must be either unset or set to a non-empty string"
            errors.append(invalid("spec.nodeName", node_name, detail))
    selector = spec.get("nodeSelector")
    if selector is not None:
        chosen.append("`nodeSelector`")
        errors += node_selector(selector, "spec.nodeSelector")
        terms = _mapping(selector).get("nodeSelectorTerms")
        if len(_list(terms)) != 1:
            # "This additional constraint simplifies merging of different selectors when
            # devices are allocated from different slices."
            errors.append(
                invalid(
                    "spec.nodeSelector.nodeSelectorTerms",
                    _go_terms(terms),
                    "must have exactly one node selector term",
                )
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(key) is not None:
            if spec[key] is True:
                chosen.append(f"`{key}`")
            else:
                errors.append(invalid(f"spec.{key}", spec[key], _UNSET_OR_TRUE))
    if not chosen:
        errors.append(required("spec", _ONE_OF))
    elif len(chosen) > 1:
        shown = "{" + ", ".join(chosen) + "}"
        errors.append(invalid("spec", shown, f"{_ONE_OF}, but multiple fields are set"))
    return errors


def device_placement(device: dict[str, Any], path: str, per_device: bool) -> list[FieldError]:
    """The placement part of validateDevice (``per_device``: the slice's
    ``perDeviceNodeSelection`` is true)."""
    if not per_device:
        if any(device.get(key) is not None for key in ("nodeName", "nodeSelector", "allNodes")):
            return [invalid(path, None, _ONLY_PER_DEVICE)]
        return []
    errors: list[FieldError] = []
    chosen = []
    node_name = device.get("nodeName")
    if node_name is not None:
        if node_name:
            chosen.append("`nodeName`")
            errors += subdomain(node_name, f"{path}.nodeName")
        else:
            errors.append(invalid(f"{path}.nodeName", node_name, "must not be empty"))
    if device.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        errors += node_selector(device["nodeSelector"], f"{path}.nodeSelector")
    if device.get("allNodes") is not None:
        if device["allNodes"] is True:
            chosen.append("`allNodes`")
        else:
            errors.append(invalid(f"{path}.allNodes", device["allNodes"], _UNSET_OR_TRUE))
    if not chosen:
        errors.append(required(path, _ONE_OF_PER_DEVICE))
    elif len(chosen) > 1:
        errors.append(invalid(path, "{" + ", ".join(chosen) + "}", _ONE_OF_PER_DEVICE))
    return errors


def node_selector(selector: Any, path: str) -> list[FieldError]:
    """ValidateNodeSelector with its terms."""
    terms_path = f"{path}.nodeSelectorTerms"
    terms = _list(_mapping(selector).get("nodeSelectorTerms"))
    if not terms:
        return [required(terms_path, "must have at least one node selector term")]
    errors: list[FieldError] = []
    for index, given in enumerate(terms):
        term = _mapping(given)
        term_path = f"{terms_path}[{index}]"
        for number, requirement in enumerate(_list(term.get("matchExpressions"))):
            field = f"{term_path}.matchExpressions[{number}]"
            errors += _label_requirement(_mapping(requirement), field)
        for number, requirement in enumerate(_list(term.get("matchFields"))):
            field = f"{term_path}.matchFields[{number}]"
            errors += _field_requirement(_mapping(requirement), field)
    return errors


def _label_requirement(requirement: dict[str, Any], path: str) -> list[FieldError]:
    """ValidateNodeSelectorRequirement."""
    errors: list[FieldError] = []
    operator = requirement.get("operator")
    values = [_text(value) for value in _list(requirement.get("values"))]
    if operator in ("In", "NotIn"):
        if not values:
            detail = "must be specified when `operator` is 'In' or 'NotIn'"
            errors.append(required(f"{path}.values", detail))
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            errors.append(forbidden(f"{path}.values", detail))
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            detail = "must be specified single value when `operator` is 'Lt' or 'Gt'"
            errors.append(required(f"{path}.values", detail))
    else:
        errors.append(invalid(f"{path}.operator", _text(operator), "not a valid selector operator"))
    key = _text(requirement.get("key"))
    errors += [invalid(f"{path}.key", key, message) for message in label_key_errors(key)]
    for index, value in enumerate(values):
        field = f"{path}.values[{index}]"
        errors += [invalid(field, value, message) for message in label_value_errors(value)]
    return errors


def _field_requirement(requirement: dict[str, Any], path: str) -> list[FieldError]:
    """ValidateNodeFieldSelectorRequirement: only metadata.name, which must be a node name."""
    errors: list[FieldError] = []
    operator = requirement.get("operator")
    values = [_text(value) for value in _list(requirement.get("values"))]
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            detail = (
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"
            )
            errors.append(required(f"{path}.values", detail))
    else:
        errors.append(invalid(f"{path}.operator", _text(operator), "not a valid selector operator"))
    key = _text(requirement.get("key"))
    if key != "metadata.name":
        errors.append(invalid(f"{path}.key", key, "not a valid field selector key"))
    else:
        for index, value in enumerate(values):
            errors += subdomain(value, f"{path}.values[{index}]")
    return errors


def _go_terms(terms: Any) -> Any:
    """The terms as the internal Go structs print (a nil slice as null)."""
    if terms is None:
        return None

    def requirements(given: Any) -> Any:
        if given is None:
            return None
        return [
            {
                "Key": _text(_mapping(r).get("key")),
                "Operator": _text(_mapping(r).get("operator")),
                "Values": _mapping(r).get("values"),
            }
            for r in _list(given)
        ]

    return [
        {
            "MatchExpressions": requirements(_mapping(term).get("matchExpressions")),
            "MatchFields": requirements(_mapping(term).get("matchFields")),
        }
        for term in _list(terms)
    ]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
