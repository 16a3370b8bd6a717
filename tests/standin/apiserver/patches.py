"""PATCH bodies as the API server applies them: JSON patch (RFC 6902, by the ``jsonpatch``
library), JSON merge patch (RFC 7386) and strategic merge patch for maps only."""

from __future__ import annotations

import copy
import json
from typing import Any

# jsonpatch ships type stubs only since 1.34 (Debian 12 and Python 3.9 get older ones).
import jsonpatch  # type: ignore[import-untyped,unused-ignore]

from tests.standin.apiserver.wire import Fail, fail

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)


def patch_type_of(content_type: str | None) -> str:
    """The patch type of a request, or the real server's 415."""
    patch_type = (content_type or "").partition(";")[0].strip().lower()
    if patch_type not in PATCH_TYPES:
        raise fail(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types "
            f"include: {', '.join(PATCH_TYPES)}",
        )
    return patch_type


def apply_patch(patch_type: str, current: dict[str, Any], body: bytes) -> dict[str, Any]:
    """The patched object, with the real server's 400 and 422 answers."""
    try:
        patch = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        if patch_type == JSON_PATCH:
            raise fail(400, "BadRequest", str(error)) from None
        raise fail(400, "BadRequest", "Invalid JSON Patch", error=str(error)) from None
    if patch_type == JSON_PATCH:
        result = _json_patch(current, patch)
    else:
        if not isinstance(patch, dict):
            raise fail(400, "BadRequest", "Invalid JSON Patch", error="not a JSON object")
        if patch_type == STRATEGIC_MERGE_PATCH:
            problem = _strategic_problem(patch)
            if problem:
                raise cannot_apply(problem)
        result = merge(current, patch)
    if not isinstance(result, dict):
        raise cannot_apply("the patched document is not an object")
    return result


def _json_patch(current: dict[str, Any], patch: Any) -> Any:
    """RFC 6902 by the jsonpatch library."""
    # What Go's json.Unmarshal into a jsonpatch.Patch refuses is a 400; null is no patch.
    patch = [] if patch is None else patch
    if not isinstance(patch, list):
        raise fail(400, "BadRequest", _unmarshal_error(patch, "Patch"))
    for operation in patch:
        if not isinstance(operation, dict):
            raise fail(400, "BadRequest", _unmarshal_error(operation, "Operation"))
    try:
        return jsonpatch.JsonPatch(patch).apply(current)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise cannot_apply(str(error)) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
        raise cannot_apply(f"{type(error).__name__}: {error}") from None


def _unmarshal_error(value: object, go_type: str) -> str:
    """Go's words for JSON of the wrong type."""
    kinds = ((bool, "bool"), (str, "string"), ((int, float), "number"), (dict, "object"))
    kind = next((k for t, k in kinds if isinstance(value, t)), "array")
    return f"json: cannot unmarshal {kind} into Go value of type jsonpatch.{go_type}"


def cannot_apply(error: str) -> Fail:
    """A JSON patch that does not apply: the real server keeps the reason to itself."""
    message = "the server rejected our request due to an error in our request"
    return fail(422, "Invalid", message, {}, error)


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _strategic_problem(patch: Any, path: str = "") -> str | None:
    """A strategic merge patch is a merge patch for maps; the stand-in refuses the parts
    where they differ (lists, ``$patch`` directives) rather than get them wrong."""
    if isinstance(patch, list):
        return f"the stand-in does not merge lists strategically ({path or '/'})"
    if isinstance(patch, dict):
        for key, value in patch.items():
            if key.startswith("$"):
                return f"the stand-in does not support the directive {key} ({path or '/'})"
            problem = _strategic_problem(value, f"{path}/{key}")
            if problem:
                return problem
    return None
