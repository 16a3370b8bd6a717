"""A ResourceSlice's ``spec.nodeSelector`` as a 1.37 API server validates it
(pkg/apis/resource/validation/validation.go ``validateResourceSliceSpec``: core's
``ValidateNodeSelector`` and exactly one term; pkg/apis/core/validation/validation.go
``ValidateNodeSelector``, ``ValidateNodeSelectorTerm``, ``ValidateNodeSelectorRequirement``).

Found against the real API server (tests/kube/test_cp_cluster_publisher.py's cluster pools are
the first slices with a node selector). Checked: the number of terms, each expression's
operator and values. Not checked: the keys' and values' label syntax, matchFields.
"""

from __future__ import annotations

import json
from typing import Any

# (field, kind, value, detail) of a field error, the value None when not shown; validation.py
# makes its FieldErrors of them (this module stays below it).
Problem = tuple[str, str, Any, str]
_ONE_TERM = "must have exactly one node selector term"


class GoText(str):
    """A bad value already in the words field.Error prints it with (shown unquoted)."""


def required(field: str, detail: str) -> Problem:
    return (field, "Required value", None, detail)


def invalid(field: str, value: Any, detail: str) -> Problem:
    return (field, "Invalid value", value, detail)


def slice_node_selector(selector: Any, path: str = "spec.nodeSelector") -> list[Problem]:
    terms = (selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None) or []
    field = f"{path}.nodeSelectorTerms"
    errors: list[Problem] = []
    if not terms:  # ValidateNodeSelector stops here; the slice's own check comes still
        errors.append(required(field, "must have at least one node selector term"))
    for i, term in enumerate(terms):
        for j, requirement in enumerate(term.get("matchExpressions") or []):
            errors += _requirement(requirement, f"{field}[{i}].matchExpressions[{j}]")
    if len(terms) != 1:
        errors.append(invalid(field, GoText(_internal_json(terms)), _ONE_TERM))
    return errors


def _requirement(requirement: dict[str, Any], path: str) -> list[Problem]:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if operator in ("In", "NotIn") and not values:
        detail = "must be specified when `operator` is 'In' or 'NotIn'"
        return [required(f"{path}.values", detail)]
    if operator in ("Exists", "DoesNotExist") and values:
        detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        return [(f"{path}.values", "Forbidden", None, detail)]
    if operator in ("Gt", "Lt") and len(values) != 1:
        detail = "must be specified single value when `operator` is 'Lt' or 'Gt'"
        return [required(f"{path}.values", detail)]
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        return [invalid(f"{path}.operator", operator, "not a valid selector operator")]
    return []


def _internal_json(terms: list[Any]) -> str:
    """The terms as field.Error prints them: json.Marshal of the internal type, whose fields
    have no JSON tags (Go's names, nil slices as null), compact."""

    def requirements(items: Any) -> list[dict[str, Any]] | None:
        if not items:
            return None
        return [
            {"Key": r.get("key"), "Operator": r.get("operator"), "Values": r.get("values") or None}
            for r in items
        ]

    internal = [
        {
            "MatchExpressions": requirements(term.get("matchExpressions")),
            "MatchFields": requirements(term.get("matchFields")),
        }
        for term in terms
    ]
    return json.dumps(internal, separators=(",", ":"))
