"""Authentication and authorization as the real API server chains them.

Authentication: a client certificate signed by the stand-in's CA (user from CN, groups from O)
wins over ``Authorization: Bearer <token>``; no valid credentials is 401 (anonymous auth off).
Every authenticated user is also in ``system:authenticated``.

Authorization is a union, as in the real server (staging/src/k8s.io/apiserver/pkg/authorization/
union): the Node authorizer first (plugin/pkg/auth/authorizer/node/node_authorizer.go), then
RBAC. ``system:masters`` may do anything. A token is either all-powerful (``rules=None``, the
stand-in's historical "allowed" token), powerless, or held to RBAC rules given by the test
(:class:`Rule`, like an rbac/v1 PolicyRule bound to the token's user). A refusal is the real
``Forbidden`` status (responsewriters.forbiddenMessage): ``<resource>.<group> "<name>" is
forbidden: User "<user>" cannot <verb> resource "<resource>" in API group "<group>" at the
cluster scope`` (or ``in the namespace "<ns>"``), then ``: <reason>`` when the Node authorizer
gave one; RBAC gives none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.standin.apiserver.certificates import NODE_USER_PREFIX, NODES_GROUP
from tests.standin.apiserver.wire import Fail, Identity, fail

MASTERS_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"
DEFAULT_TOKEN_USER = "system:serviceaccount:kube-system:token-resource"
# serviceaccount.NodeNameKey: the node of the pod a service-account token is bound to.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Rule:
    """An RBAC PolicyRule: ``"*"`` matches every group, resource or verb; no resource names
    means every name. Resources name subresources as ``nodes/status``."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def allows(self, verb: str, group: str, resource: str, name: str) -> bool:
        return (
            _matches(self.api_groups, group)
            and _matches(self.resources, resource)
            and _matches(self.verbs, verb)
            # RBAC's resourceNames never match a request without a name (list, create).
            and (not self.resource_names or name in self.resource_names)
        )


def _matches(allowed: tuple[str, ...], value: str) -> bool:
    return "*" in allowed or value in allowed


RESOURCE_GROUP = "resource.k8s.io"
# The agent's DaemonSet ClusterRole (deploy/kubernetes): slices of any node (a
# ValidatingAdmissionPolicy narrows them to its own), claims read one by one.
DAEMONSET_RULES = (
    Rule(
        (RESOURCE_GROUP,),
        ("resourceslices",),
        ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"),
    ),
    Rule((RESOURCE_GROUP,), ("resourceclaims",), ("get",)),
)


@dataclass(frozen=True)
class TokenGrant:
    """A bearer token's user and what RBAC lets it do (None: everything, as before RBAC)."""

    user: str
    groups: tuple[str, ...]
    rules: tuple[Rule, ...] | None
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def node_identity(identity: Identity) -> str | None:
    """The node name of a node identity (user system:node:<name> in group system:nodes), as
    pkg/auth/nodeidentifier reads it."""
    if identity.user.startswith(NODE_USER_PREFIX) and NODES_GROUP in identity.groups:
        return identity.user[len(NODE_USER_PREFIX) :]
    return None


def forbidden(
    identity: Identity,
    verb: str,
    group: str,
    resource: str,
    name: str = "",
    namespace: str = "",
    reason: str = "",
) -> Fail:
    """The real server's 403 for a request no authorizer allowed."""
    base = resource.partition("/")[0]
    qualified = f"{base}.{group}" if group else base
    subject = f'{qualified} "{name}"' if name else qualified
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{identity.user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}" {scope}'
    )
    if reason:
        message += f": {reason}"
    details: dict[str, Any] = {"kind": base}
    if group:
        details["group"] = group
    if name:
        details["name"] = name
    return fail(403, "Forbidden", message, details)


class Authorizer:
    """The tokens it knows, and the static part of authorization (masters, tokens' RBAC).

    The Node authorizer's graph (slices and claims of a node) lives with the objects; its
    callers use :meth:`rbac_allows` for everything the graph does not decide.
    """

    def __init__(self) -> None:
        self._tokens: dict[str, TokenGrant] = {}

    def add_token(
        self,
        token: str,
        *,
        allowed: bool = True,
        user: str | None = None,
        rules: Iterable[Rule] | None = None,
        node: str | None = None,
    ) -> None:
        user = user or DEFAULT_TOKEN_USER
        groups = [AUTHENTICATED_GROUP]
        if user.startswith(_SERVICE_ACCOUNT_PREFIX):
            namespace = user[len(_SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
            groups[:0] = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        if rules is not None:
            granted: tuple[Rule, ...] | None = tuple(rules)
        else:
            granted = None if allowed else ()
        # A service-account token bound to a pod names the pod's node in the user's extra
        # (ServiceAccountInfo.UserInfo, k8s.io/apiserver/pkg/authentication/serviceaccount/
        # util.go); the pod's name and uid and the credential id it also adds are not modelled.
        extra = ((NODE_NAME_EXTRA, (node,)),) if node else ()
        self._tokens[token] = TokenGrant(user, tuple(groups), granted, extra)

    def remove_token(self, token: str) -> None:
        del self._tokens[token]

    def authenticate(
        self, authorization: str | None, peer_cert: Mapping[str, Any] | None
    ) -> Identity:
        """x509 first, then the bearer token; anonymous requests are refused."""
        if peer_cert:  # present only if it verified against the CA
            user, groups = "", []
            for rdn in peer_cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        user = value
                    elif key == "organizationName":
                        groups.append(value)
            if user:
                return Identity(user, (*groups, AUTHENTICATED_GROUP))
        parts = (authorization or "").split(" ", 2)
        if len(parts) >= 2 and parts[0].lower() == "bearer":
            known = self._tokens.get(parts[1]) if parts[1] else None
            if known is not None:
                return Identity(known.user, known.groups, parts[1], known.extra)
        raise fail(401, "Unauthorized", "Unauthorized")

    def rbac_allows(
        self, identity: Identity, verb: str, group: str, resource: str, name: str = ""
    ) -> bool:
        """What ``system:masters`` and the tokens' rules allow (nodes have no rules here:
        the Node authorizer decides for them)."""
        if MASTERS_GROUP in identity.groups:
            return True
        if identity.token is None:
            return False
        rules = self._tokens[identity.token].rules
        if rules is None:
            return True
        return any(rule.allows(verb, group, resource, name) for rule in rules)

    def authorize_node(self, identity: Identity, verb: str, resource: str, name: str) -> None:
        """A request for a Node: a node identity may get, list, watch (by a ``metadata.name``
        field selector: ``name``) and patch its own Node (the Node authorizer with
        NodeRestriction; authorization comes before the lookup, so another, missing node is
        403 and not 404)."""
        if self.rbac_allows(identity, verb, "", resource, name):
            return
        own = node_identity(identity)
        if own is None:
            raise forbidden(identity, verb, "", resource, name)
        if own == name:
            return
        if not name:  # a list or watch without its own name in a metadata.name selector
            reason = f"node '{own}' cannot read all nodes, only its own Node object"
            raise forbidden(identity, verb, "", resource, reason=reason)
        if verb == "patch":  # NodeRestriction's words
            raise fail(
                403,
                "Forbidden",
                f'nodes "{name}" is forbidden: node "{own}" is not allowed to modify node "{name}"',
                {"name": name, "kind": "nodes"},
            )
        reason = f"node '{own}' cannot read '{name}', only its own Node object"
        raise forbidden(identity, verb, "", resource, name, reason=reason)
