"""ValidatingAdmissionPolicies and their bindings, applied to writes of resource.k8s.io objects
and of pods (pods.py) as the real API server's validating admission plugin applies them
(k8s.io/apiserver/pkg/admission/plugin/policy/validating: dispatcher.go ``Dispatch``,
validator.go ``Validate``; ``matchConstraints`` as webhook/predicates/rules/rules.go
``Matcher``, ``matchConditions`` as webhook/matchconditions/matcher.go ``Match``).

A stand-in has none until a test applies them
(:meth:`~tests.standin.apiserver.ApiServerStandin.apply_admission_policies`, e.g. with
:func:`policy_documents` of deploy/kubernetes/overlays/dra/admission.yaml); then they hold from
the next request on (a real server's informer takes a moment). Their CEL is cel.py's: a policy
with an expression or a field the stand-in cannot evaluate is refused when it is applied
(:class:`UnsupportedPolicy`), never half enforced. Supported: ``failurePolicy``;
``matchConstraints.resourceRules`` for resource.k8s.io and the core group's ``pods``
(``apiGroups``, ``apiVersions``, ``operations``, ``resources``, ``scope``; no selectors, no
``excludeResourceRules``);
``matchConditions``, ``variables``, ``validations`` (``expression``, ``message``,
``messageExpression``, ``reason``); bindings with ``validationActions: [Deny]`` and neither
``paramRef`` nor ``matchResources``.

A write runs through them after validation (registry/generic/registry/store.go: ``Create``
calls ``createValidation`` after ``BeforeCreate``, ``Update`` ``updateValidation`` after the
resourceVersion check and ``BeforeUpdate``) and once per object of a deletecollection, which
stops at the first refused one (``DeleteCollection`` with one worker). A refusal is the first
denied validation's: ``<resource>.<group> "<name>" is forbidden: ValidatingAdmissionPolicy
'<policy>' with binding '<binding>' denied request: <message>``, with the validation's
``reason`` (Invalid, 422, by default) and the message again as the one cause.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.standin.apiserver.authz import RESOURCE_GROUP
from tests.standin.apiserver.cel import (
    Activation,
    AdmissionRequest,
    EvaluationError,
    Expression,
    compile_expression,
)
from tests.standin.apiserver.wire import Fail, Identity, fail

POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
_API_VERSION = "admissionregistration.k8s.io/v1"
_POLICY_FIELDS = {
    "failurePolicy",
    "matchConstraints",
    "matchConditions",
    "variables",
    "validations",
}
_MATCH_FIELDS = {"resourceRules", "matchPolicy", "namespaceSelector", "objectSelector"}
_RULE_FIELDS = {"apiGroups", "apiVersions", "operations", "resources", "scope"}
_VALIDATION_FIELDS = {"expression", "message", "messageExpression", "reason"}
_BINDING_FIELDS = {"policyName", "validationActions"}
# policy_decision.go, reasonToCode: the reasons a validation may give.
_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}
# The writes that pass through admission here: (group, resource) of resource.k8s.io's objects
# and the core group's pods (pods.py; their subresources are not served).
_ADMITTED = {
    (RESOURCE_GROUP, "resourceslices"),
    (RESOURCE_GROUP, "resourceclaims"),
    (RESOURCE_GROUP, "deviceclasses"),
    (RESOURCE_GROUP, "*"),
    ("", "pods"),
}
_MAX_MESSAGE = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes


class UnsupportedPolicy(ValueError):
    """A policy or binding the stand-in cannot enforce as the real server would."""


def policy_documents(path: Path) -> list[dict[str, Any]]:
    """The policies and bindings of a manifest file."""
    return [
        document
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("kind") in (POLICY_KIND, BINDING_KIND)
    ]


@dataclass(frozen=True)
class _Validation:
    text: str
    expression: Expression
    message: str
    message_expression: Expression | None
    reason: str


@dataclass(frozen=True)
class _Decision:
    """A denial: why, in the words the refusal carries."""

    message: str
    reason: str = "Invalid"


@dataclass(frozen=True)
class _Policy:
    name: str
    fail_closed: bool  # failurePolicy: Fail, the default
    rules: tuple[Mapping[str, Any], ...]
    conditions: tuple[Expression, ...]
    variables: Mapping[str, Expression]
    validations: tuple[_Validation, ...]

    def matches(self, request: AdmissionRequest) -> bool:
        return any(_rule_matches(rule, request) for rule in self.rules)

    def denials(self, request: AdmissionRequest) -> list[_Decision]:
        """validator.go ``Validate``: the conditions, then every validation in order."""
        activation = Activation(request, self.variables)
        errors = []
        for condition in self.conditions:
            try:
                if condition(activation) is False:  # any false condition: the policy skips
                    return []
            except EvaluationError as error:
                errors.append(str(error))
        if errors:
            return [_Decision(", ".join(errors))] if self.fail_closed else []
        denied = []
        for validation in self.validations:
            try:
                allowed = validation.expression(activation) is True
            except EvaluationError as error:
                if self.fail_closed:
                    denied.append(_Decision(str(error)))
                continue
            if not allowed:
                denied.append(_Decision(_message(validation, activation), validation.reason))
        return denied


def _message(validation: _Validation, activation: Activation) -> str:
    """The messageExpression's string if it gives a usable one, else the message, else the
    expression (validator.go)."""
    message = ""
    if validation.message_expression is not None:
        try:
            value = validation.message_expression(activation)
        except EvaluationError:
            value = None  # the real server logs it and falls back
        if isinstance(value, str):
            message = value.strip()
            if len(message) > _MAX_MESSAGE or "\n" in message:
                message = ""
    if not message:
        message = validation.message.strip()
    return message or f"failed expression: {validation.text.strip()}"


def _rule_matches(rule: Mapping[str, Any], request: AdmissionRequest) -> bool:
    resource, _, subresource = request.resource.partition("/")
    scope = rule.get("scope", "*")
    in_scope = scope in ("*", "Namespaced" if request.namespace else "Cluster")
    return (
        in_scope
        and _listed(rule.get("apiGroups", ()), request.group)
        and _listed(rule.get("apiVersions", ()), request.version)
        and _listed(rule.get("operations", ()), request.operation)
        and any(
            wanted.partition("/")[0] in ("*", resource)
            and wanted.partition("/")[2] in ("*", subresource)
            for wanted in rule.get("resources", ())
        )
    )


def _listed(items: Iterable[str], value: str) -> bool:
    return any(item in ("*", value) for item in items)


def _unsupported(kind: str, fields: Iterable[str], known: set[str]) -> None:
    extra = sorted(set(fields) - known)
    if extra:
        raise UnsupportedPolicy(f"the API server stand-in does not model {kind} {extra}")


def _compile_policy(document: Mapping[str, Any]) -> _Policy:
    name, spec = document["metadata"]["name"], document.get("spec") or {}
    _unsupported("ValidatingAdmissionPolicy spec fields", spec, _POLICY_FIELDS)
    constraints = spec.get("matchConstraints") or {}
    _unsupported("matchConstraints fields", constraints, _MATCH_FIELDS)
    for selector in ("namespaceSelector", "objectSelector"):
        if constraints.get(selector):
            raise UnsupportedPolicy(f"the API server stand-in does not model a {selector}")
    rules = tuple(constraints.get("resourceRules") or ())
    for rule in rules:
        _unsupported("resourceRules fields", rule, _RULE_FIELDS)
        if any(
            (group, resource) not in _ADMITTED
            for group in rule.get("apiGroups", ())
            for resource in rule.get("resources", ())
        ):
            # Only these writes pass through admission policies here.
            raise UnsupportedPolicy(f"the stand-in admits {sorted(_ADMITTED)} only, not {rule}")
    declared: dict[str, Expression] = {}
    for variable in spec.get("variables") or ():  # each may use the ones before it
        declared[variable["name"]] = compile_expression(variable["expression"], declared)
    validations = []
    for validation in spec.get("validations") or ():
        _unsupported("validation fields", validation, _VALIDATION_FIELDS)
        text = validation["expression"]
        message_text = validation.get("messageExpression")
        validations.append(
            _Validation(
                text,
                compile_expression(text, declared),
                validation.get("message", ""),
                compile_expression(message_text, declared) if message_text else None,
                validation.get("reason", "Invalid"),
            )
        )
        if validations[-1].reason not in _CODES:
            raise UnsupportedPolicy(f"a validation's reason is one of {sorted(_CODES)}")
    return _Policy(
        name,
        spec.get("failurePolicy", "Fail") == "Fail",
        rules,
        tuple(
            compile_expression(condition["expression"], declared)
            for condition in spec.get("matchConditions") or ()
        ),
        declared,
        tuple(validations),
    )


class AdmissionPolicies:
    """The policies and bindings a stand-in holds, by name (caller holds the stand-in's lock)."""

    def __init__(self) -> None:
        self._policies: dict[str, _Policy] = {}
        self._bindings: dict[str, str] = {}  # binding name -> policy name

    def apply(self, document: Mapping[str, Any]) -> None:
        """Create or replace a ValidatingAdmissionPolicy or a binding (the apiVersion v1)."""
        kind, version = document.get("kind"), document.get("apiVersion")
        if version != _API_VERSION or kind not in (POLICY_KIND, BINDING_KIND):
            raise UnsupportedPolicy(f"not a {_API_VERSION} policy or binding: {kind} {version}")
        if kind == POLICY_KIND:
            policy = _compile_policy(document)
            self._policies[policy.name] = policy
            return
        spec = document.get("spec") or {}
        _unsupported("ValidatingAdmissionPolicyBinding spec fields", spec, _BINDING_FIELDS)
        if list(spec.get("validationActions") or ()) != ["Deny"]:
            raise UnsupportedPolicy("the stand-in models a binding's validationActions [Deny]")
        self._bindings[document["metadata"]["name"]] = spec["policyName"]

    def admit(
        self,
        identity: Identity,
        operation: str,
        resource: str,
        name: str,
        obj: Mapping[str, Any] | None,
        old: Mapping[str, Any] | None,
        group: str = RESOURCE_GROUP,
    ) -> None:
        """Refuse (:class:`Fail`) a write of ``group``/v1 ``resource`` by ``identity`` that a
        policy denies: ``obj`` is the object as it would be stored, ``old`` the stored one;
        ``name`` the request's (none for a deletecollection)."""
        if not self._bindings:
            return
        namespace = str(((obj or old or {}).get("metadata") or {}).get("namespace") or "")
        extra = dict(identity.extra)
        request = AdmissionRequest(
            operation,
            group,
            "v1",
            resource,
            namespace,
            name,
            identity.user,
            extra,
            obj,
            old,
        )
        self.validate(request)

    def validate(self, request: AdmissionRequest) -> None:
        """dispatcher.go ``Dispatch``: the first denial of any bound, matching policy."""
        for binding, policy_name in sorted(self._bindings.items(), key=_by_policy):
            policy = self._policies.get(policy_name)
            if policy is None or not policy.matches(request):
                continue
            denied = policy.denials(request)
            if denied:
                raise _refusal(request, policy.name, binding, denied[0])


def _by_policy(binding: tuple[str, str]) -> tuple[str, str]:
    return binding[1], binding[0]


def _refusal(request: AdmissionRequest, policy: str, binding: str, decision: _Decision) -> Fail:
    """admission.NewForbidden with the decision's reason and code, and the message as a cause."""
    message = (
        f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: "
        f"{decision.message}"
    )
    name = _resource_name(request)
    details = {
        "name": name,
        "group": request.group,
        "kind": request.resource,
        "causes": [{"message": message}],
    }
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    text = f'{qualified} "{name}" is forbidden: {message}'
    return fail(_CODES[decision.reason], decision.reason, text, details)


def _resource_name(request: AdmissionRequest) -> str:
    """admission/errors.go ``extractResourceName``: the request's name, else the object's (or
    its generateName), else "Unknown" (a deletecollection's: it has no object)."""
    if request.name:
        return request.name
    metadata = (request.obj or {}).get("metadata") or {}
    return str(metadata.get("name") or metadata.get("generateName") or "Unknown")
