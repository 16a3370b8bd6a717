"""The kubelet stand-in's DRA manager: its NodePrepareResources and NodeUnprepareResources
calls to the plugins.

Calls (manager.go ``prepareResources``/``unprepareResources``, dra_plugin.go): one request per
driver with the claims' namespace, uid and name, a 45 s deadline, the chosen version's method
path. The kubelet's errors: "DRA driver <d> is not registered", "NodePrepareResources: <rpc
error>", "NodePrepareResources failed for ResourceClaim <name>: <error>", "NodePrepareResources
returned result for unknown claim UID <uid>", "NodePrepareResources skipped <n> ResourceClaims"
(the last two are also protocol violations here: every claim needs exactly one entry).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import grpc

from tests.standin.kubelet_dra_state import CallResult, ClaimResult, DraCall, DraState, DriverView
from tests.standin.kubelet_rules import rpc_error
from token_resource.protocol import dra_v1_pb2 as pb
from token_resource.protocol.dra import method

CALL_SECONDS = 45.0


class PluginCalls(DraState):
    """The calls, each recorded in its driver's view."""

    _violation: Callable[[str], None]  # the kubelet stand-in's, for a protocol violation

    def call(
        self, name: str, driver: str, claims: Sequence[tuple[str, str, str]], timeout: float
    ) -> CallResult:
        """NodePrepareResources or NodeUnprepareResources, as the kubelet's manager does."""
        with self._cond:
            plugins = self._plugins.get(driver, [])
            connected = [p for p in plugins if p.connected]
            chosen = connected or plugins
        if not chosen:
            return self._record(
                name, driver, "", claims, CallResult(error=f"DRA driver {driver} is not registered")
            )
        plugin = chosen[-1]
        prepare = name == "NodePrepareResources"
        request_type = (
            pb.NodePrepareResourcesRequest if prepare else pb.NodeUnprepareResourcesRequest
        )
        response_type = (
            pb.NodePrepareResourcesResponse if prepare else pb.NodeUnprepareResourcesResponse
        )
        request = request_type(
            claims=[pb.Claim(namespace=ns, uid=uid, name=claim) for ns, uid, claim in claims]
        )
        rpc = plugin.channel.unary_unary(
            method(plugin.version, name), request_type.SerializeToString, response_type.FromString
        )
        try:
            response = rpc(request, timeout=timeout)
        except grpc.RpcError as failure:
            failed = CallResult(error=f"{name}: {rpc_error(failure)}")
            return self._record(name, driver, plugin.endpoint, claims, failed)
        results: dict[str, ClaimResult] = {}
        error: str | None = None
        names = {uid: claim for _, uid, claim in claims}
        for uid, answer in response.claims.items():
            devices = tuple(
                (tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids))
                for d in getattr(answer, "devices", ())
            )
            results[uid] = ClaimResult(devices, answer.error)
            if uid not in names:
                error = error or f"{name} returned result for unknown claim UID {uid}"
                self._violate(f"{driver}: {name} answered for unknown claim UID {uid}")
            elif answer.error:
                error = error or f"{name} failed for ResourceClaim {names[uid]}: {answer.error}"
        missing = [uid for uid in names if uid not in response.claims]
        if missing and error is None:
            error = f"{name} skipped {len(missing)} ResourceClaims"
        if missing:
            self._violate(f"{driver}: {name} left out claims {missing}")
        return self._record(name, driver, plugin.endpoint, claims, CallResult(results, error))

    def _record(
        self,
        name: str,
        driver: str,
        endpoint: str,
        claims: Sequence[tuple[str, str, str]],
        result: CallResult,
    ) -> CallResult:
        call = DraCall(endpoint, tuple(claims), result.error)
        with self._cond:
            view = self._drivers.get(driver, DriverView(driver))
            if name == "NodePrepareResources":
                self._drivers[driver] = replace(view, prepares=(*view.prepares, call))
            else:
                self._drivers[driver] = replace(view, unprepares=(*view.unprepares, call))
            self._changed(f"DRA driver {driver}: {name} {list(claims)} -> {result.error or 'ok'}")
        return result

    def _violate(self, text: str) -> None:
        with self._cond:
            self._violation(text)
