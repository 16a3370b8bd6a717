"""The few forms of CEL expressions the API server stand-in evaluates, each mapped to the Python
it means, for the ValidatingAdmissionPolicies of admission.py.

No CEL interpreter is a test dependency, and the shipped policy needs little: an expression in
any other form is refused when its policy is applied (:class:`UnsupportedExpression`), so a
policy the stand-in cannot evaluate fails the test that applies it instead of being half
enforced. Whitespace outside string literals is insignificant, as in CEL. The forms:

- a string literal ``'...'`` or ``"..."`` (no escapes, no raw or triple-quoted strings);
- ``variables.<name>`` (a variable the policy declares), ``request.userInfo.username``,
  ``request.operation``: the operands;
- ``A == B`` and ``A != B`` of two operands;
- an operand alone, or ``A + B + ...``: strings concatenated;
- ``'<key>' in request.userInfo.extra ? request.userInfo.extra['<key>'][0] : ''``: the
  first value of one of the user's extras, or '';
- ``(request.operation == 'DELETE' ? oldObject : object).spec.?<field>.orValue('')``: a field
  of the object's spec (the old object for a DELETE, which has no other), or '' without one;
- a path into ``object`` or ``oldObject``: ``.<field>`` selects (``no such key`` without it),
  ``.?<field>`` selects optionally, and a path with one must end in ``.orValue('')``,
  ``.orValue({})`` or ``.orValue([])`` (an optional is no operand here), e.g.
  ``oldObject.spec.?nodeName.orValue('')``, ``object.spec == oldObject.spec`` (an operand);
- ``A.metadata.?annotations.orValue({}).all(k, k.endsWith('<suffix>') || (k in
  B.metadata.?annotations.orValue({}) && B.metadata.annotations[k] ==
  A.metadata.annotations[k]))`` with A and B ``object`` and ``oldObject`` in either order (any
  variable name for ``k``): every annotation of A but those whose key ends in the suffix is
  in B with the same value (both orders together: the two differ in those annotations only).

Errors are CEL's where the real evaluator (k8s.io/apiserver/pkg/admission/plugin/cel) raises
one: ``no such key`` for a missing field selected without ``?``; their exact words are not
modelled.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any


class UnsupportedExpression(ValueError):
    """An expression in none of the forms the stand-in evaluates."""


class EvaluationError(Exception):
    """A CEL runtime error (the policy's failurePolicy decides what it means)."""


@dataclass(frozen=True)
class AdmissionRequest:
    """What a policy's expressions see of a request (cel.CreateAdmissionRequest's ``request``,
    and ``object`` / ``oldObject``)."""

    operation: str  # CREATE, UPDATE or DELETE
    group: str
    version: str
    resource: str  # with its subresource, as "resourceslices/status"
    namespace: str
    name: str  # the request's: none for a create of a generated name or a deletecollection
    username: str
    extra: Mapping[str, tuple[str, ...]]
    obj: Mapping[str, Any] | None  # ``object``: none for a DELETE
    old: Mapping[str, Any] | None  # ``oldObject``: none for a CREATE


@dataclass
class Activation:
    """A request and the policy's variables, each evaluated the first time it is used (CEL's
    variables are lazy: one that fails but is never read fails nothing)."""

    request: AdmissionRequest
    declared: Mapping[str, Expression]
    _values: dict[str, Any] = field(default_factory=dict)

    def variable(self, name: str) -> Any:
        if name not in self._values:
            self._values[name] = self.declared[name](self)
        return self._values[name]


Expression = Callable[[Activation], Any]

_LITERAL = r"'[^'\\\n]*'|\"[^\"\\\n]*\""
_TOKENS = re.compile(rf"({_LITERAL})")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_OBJECT_PATH = (
    rf"(?:object|oldObject)(?:\.\??(?!orValue\(){_NAME})*(?:\.orValue\((?:''|\{{\}}|\[\])\))?"
)
_OPERAND = (
    rf"(?:{_LITERAL}|variables\.{_NAME}|request\.userInfo\.username|request\.operation"
    rf"|{_OBJECT_PATH})"
)
_COMPARISON = re.compile(rf"(?P<left>{_OPERAND})(?P<operator>==|!=)(?P<right>{_OPERAND})")
_CONCATENATION = re.compile(rf"{_OPERAND}(?:\+{_OPERAND})*")
_EXTRA = re.compile(
    r"'(?P<key>[^'\\\n]*)'inrequest\.userInfo\.extra\?"
    r"request\.userInfo\.extra\['(?P=key)'\]\[0\]:''"
)
_ANNOTATIONS = r"(?P<{}>object|oldObject)\.metadata\.\?annotations\.orValue\(\{{\}}\)"
_ANNOTATIONS_KEPT = re.compile(
    _ANNOTATIONS.format("a")
    + rf"\.all\((?P<k>{_NAME}),(?P=k)\.endsWith\('(?P<suffix>[^'\\\n]*)'\)\|\|\("
    + rf"(?P=k)in{_ANNOTATIONS.format('b')}&&(?P=b)\.metadata\.annotations\[(?P=k)\]=="
    + r"(?P=a)\.metadata\.annotations\[(?P=k)\]\)\)"
)
_SPEC_FIELD = re.compile(
    rf"\(request\.operation=='DELETE'\?oldObject:object\)\.spec\.\?(?P<field>{_NAME})"
    r"\.orValue\(''\)"
)


def compile_expression(text: str, variables: Collection[str]) -> Expression:
    """The Python for ``text``, whose ``variables.<name>`` must be among ``variables``."""
    compact = _without_whitespace(text)
    comparison = _COMPARISON.fullmatch(compact)
    if comparison:
        left = _operand(comparison["left"], variables)
        right = _operand(comparison["right"], variables)
        if comparison["operator"] == "==":
            return lambda activation: left(activation) == right(activation)
        return lambda activation: left(activation) != right(activation)
    if _CONCATENATION.fullmatch(compact):
        parts = [_operand(part, variables) for part in _split_concatenation(compact)]
        if len(parts) == 1:
            return parts[0]
        return lambda activation: "".join(_string(part(activation)) for part in parts)
    extra = _EXTRA.fullmatch(compact)
    if extra:
        return _first_extra(extra["key"])
    return _object_form(compact, text)


def _object_form(compact: str, text: str) -> Expression:
    """The forms that read the objects as a whole."""
    kept = _ANNOTATIONS_KEPT.fullmatch(compact)
    if kept and kept["a"] != kept["b"]:
        return _annotations_kept(kept["a"], kept["b"], kept["suffix"])
    spec_field = _SPEC_FIELD.fullmatch(compact)
    if spec_field:
        return _spec_field(spec_field["field"])
    raise UnsupportedExpression(f"the API server stand-in cannot evaluate CEL {text!r}")


def _without_whitespace(text: str) -> str:
    """``text`` without the whitespace between tokens: string literals stay as written."""
    pieces = _TOKENS.split(text.strip())
    # split() with a group: the literals are at the odd indices.
    return "".join(
        piece if index % 2 else re.sub(r"\s+", "", piece) for index, piece in enumerate(pieces)
    )


def _split_concatenation(compact: str) -> list[str]:
    """The operands of ``A+B+...`` (a ``+`` inside a literal is no operator)."""
    parts: list[str] = re.findall(_OPERAND, compact)
    return parts


def _operand(text: str, variables: Collection[str]) -> Expression:
    if text[0] in "'\"":
        value = text[1:-1]
        return lambda activation: value
    if text == "request.userInfo.username":
        return lambda activation: activation.request.username
    if text == "request.operation":
        return lambda activation: activation.request.operation
    if text.startswith(("object", "oldObject")):
        return _object_path(text)
    name = text[len("variables.") :]
    if name not in variables:
        raise UnsupportedExpression(f"undeclared reference to {text!r}")
    return lambda activation: activation.variable(name)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise EvaluationError(f"no such overload: string + {type(value).__name__}")
    return value


def _first_extra(key: str) -> Expression:
    def evaluate(activation: Activation) -> str:
        values = activation.request.extra.get(key)
        if values is None:
            return ""
        if not values:
            raise EvaluationError("index out of bounds: 0")
        return values[0]

    return evaluate


def _spec_field(name: str) -> Expression:
    def evaluate(activation: Activation) -> Any:
        request = activation.request
        obj = request.old if request.operation == "DELETE" else request.obj
        if obj is None or "spec" not in obj:
            raise EvaluationError("no such key: spec")
        spec = obj["spec"]
        value = spec.get(name) if isinstance(spec, Mapping) else None
        return "" if value is None else value

    return evaluate


_DEFAULTS = {"''": "", "{}": {}, "[]": []}


def _side(activation: Activation, root: str) -> Any:
    """``object`` or ``oldObject``: null for a DELETE's object and a CREATE's old object."""
    request = activation.request
    return request.obj if root == "object" else request.old


def _object_path(text: str) -> Expression:
    """A selection from ``object`` or ``oldObject`` (optional ones end in ``orValue``)."""
    path, _, default_text = text.partition(".orValue(")
    root, *selections = path.split(".")
    optional = any(selection.startswith("?") for selection in selections)
    if optional != bool(default_text):
        raise UnsupportedExpression(f"the stand-in compares no optional values: {text!r}")
    default = _DEFAULTS.get(default_text[:-1])

    def evaluate(activation: Activation) -> Any:
        value: Any = _side(activation, root)
        for selection in selections:
            name = selection.lstrip("?")
            if isinstance(value, Mapping) and name in value:
                value = value[name]
            elif selection.startswith("?") or value is _ABSENT:
                value = _ABSENT  # an optional selection: none from here on
            else:
                raise EvaluationError(f"no such key: {name}")
        return default if value is _ABSENT else value

    return evaluate


_ABSENT = object()


def _annotations_kept(first: str, second: str, suffix: str) -> Expression:
    def evaluate(activation: Activation) -> bool:
        def annotations(root: str) -> Mapping[str, Any]:
            obj = _side(activation, root)
            if not isinstance(obj, Mapping) or "metadata" not in obj:
                raise EvaluationError("no such key: metadata")
            return obj["metadata"].get("annotations") or {}

        mine, theirs = annotations(first), annotations(second)
        return all(
            key.endswith(suffix) or (key in theirs and theirs[key] == value)
            for key, value in mine.items()
        )

    return evaluate
