"""Asking the kubelet to prepare, now, the pods it could not prepare while the driver was away.

A kubelet (1.36) that finds a pod's DRA driver not registered records
``FailedPrepareDynamicResources`` and tries the pod again only at its next periodic resync, a
minute later (with up to 50 % jitter), not after its error back-off; but it syncs a pod at once
when the pod's annotations change. After a node's reboot a DaemonSet's driver registers after
the kubelet has tried its pods, which would then wait that minute. So once the driver has
registered, the agent reads what the kubelet reads: the pods bound to its node (the field
selector ``spec.nodeName``, the one list the Node authorizer allows a node, and the one an
account's RBAC cannot narrow to a node, so it is always given), then each of their claims by
name. The pods whose claims the driver's devices were allocated to (node pools and cluster
pools alike), not prepared by it, get one annotation changed (``<driver>/prepare-retry``, the
time). A claim the driver prepared before counts too when its pod runs no container: after
a reboot the kubelet prepares every claim again, and a real 1.37 kubelet, which may sync such
a pod when the driver's health stream reports its devices, did not always (the pods waited for
its resync: tests/node/test_daemonset.py). A pod's status may still say Running then, as
before the reboot, until the kubelet's first sync: the pods are read again RECHECK_SECONDS
later, once. What it reads grows with its own node's pods, never with the cluster. The DaemonSet's
ServiceAccount may patch pods, and its admission policy lets it change only that annotation,
only on pods of its own node; a node's own credentials (the host's service, whose driver
registers before the kubelet starts) may read the same but patch no pod, and then nothing
changes.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from token_resource.apiserver.connection.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.connection.credentials import load_credentials
from token_resource.apiserver.objects.claims import NOT_FOUND, claim_path
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)

ANNOTATION = "prepare-retry"  # under the driver's name: <driver>/prepare-retry
FORBIDDEN = 403
# A pod in these phases runs no container again: nothing to prepare.
FINISHED = ("Succeeded", "Failed")
# Pods a log line names before it says "and N more".
LOGGED_PODS = 5
# A node's reboot nudges all its token pods at once: at most this many patches a second.
PATCHES_PER_SECOND = 50
# When the pods are read again, for those whose status still said they ran.
RECHECK_SECONDS = 5.0


@dataclass(frozen=True, order=True)
class WaitingPod:
    namespace: str
    name: str


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of a pod's claims, as the kubelet finds them: named in its spec, made from a
    template (its status says the name), or the extended-resource bridge's (KEP-5004)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {
        entry.get("name"): entry.get("resourceClaimName")
        for entry in status.get("resourceClaimStatuses") or ()
        if isinstance(entry, dict)
    }
    names = [
        claim.get("resourceClaimName") or generated.get(claim.get("name"))
        for claim in spec.get("resourceClaims") or ()
        if isinstance(claim, dict)
    ]
    names.append((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
    return [name for name in names if isinstance(name, str) and name]


def runs(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's status says every container of it runs."""
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and all(isinstance(c, dict) and "running" in (c.get("state") or {}) for c in containers)
    )


def waits_for(
    claim: Mapping[str, Any],
    pod_uid: str,
    driver: str,
    prepared: Collection[str],
    pod_runs: bool = False,
) -> bool:
    """Whether ``claim`` holds devices of ``driver``, is reserved for the pod, and is not among
    ``prepared`` (claim UIDs) or is but the pod runs no container (``pod_runs``)."""
    metadata, status = claim.get("metadata") or {}, claim.get("status") or {}
    if metadata.get("uid") in prepared and pod_runs:
        return False
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return any(
        isinstance(result, dict) and result.get("driver") == driver for result in results
    ) and any(
        isinstance(consumer, dict)
        and consumer.get("resource") == "pods"
        and consumer.get("uid") == pod_uid
        for consumer in status.get("reservedFor") or []
    )


def waiting_pods(
    client: ApiClient, node: str, driver: str, prepared: Collection[str]
) -> list[WaitingPod]:
    """The pods on ``node`` that wait for a prepare of ``driver``, in order."""
    query = urlencode({"fieldSelector": f"spec.nodeName={node}"})
    pods = client.get(f"/api/v1/pods?{query}").get("items") or []
    waiting = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        namespace = str(metadata.get("namespace"))
        for name in claim_names(pod):
            try:
                claim = client.get(claim_path(namespace, name))
            except ApiError as error:
                if error.status != NOT_FOUND:
                    raise
                continue  # not made yet, or gone with its pod
            if waits_for(claim, str(metadata.get("uid")), driver, prepared, runs(pod)):
                waiting.append(WaitingPod(namespace, str(metadata.get("name"))))
                break
    return sorted(waiting)


@dataclass(frozen=True)
class Nudged:
    pods: tuple[WaitingPod, ...]  # the pods whose annotation was changed
    # Why nothing could be asked (no permission, unreachable); None when it was.
    problem: str | None = None
    forbidden: bool = False


def nudge_waiting_pods(
    settings: KubernetesSettings,
    node: str,
    driver: str,
    prepared: Collection[str],
    done: Collection[WaitingPod] = (),
) -> Nudged:
    """Change the annotation of every pod on ``node`` waiting for a prepare of ``driver``, but
    those ``done`` already. Blocking, for a worker thread."""
    try:
        with ApiClient(load_credentials(settings)) as client:
            waiting = [
                pod for pod in waiting_pods(client, node, driver, prepared) if pod not in done
            ]
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            done = []
            for number, pod in enumerate(waiting):
                if number:
                    time.sleep(1 / PATCHES_PER_SECOND)
                try:
                    client.merge_patch(
                        f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods/"
                        f"{quote(pod.name, safe='')}",
                        {"metadata": {"annotations": {f"{driver}/{ANNOTATION}": now}}},
                    )
                except ApiError as error:
                    if error.status == FORBIDDEN:
                        raise
                    # Gone meanwhile, or refused alone: the others are still worth asking.
                    log.warning(
                        "pod %s/%s: cannot ask for its prepare: %s", pod.namespace, pod.name, error
                    )
                    continue
                done.append(pod)
            return Nudged(tuple(done))
    except ApiError as error:
        return Nudged((), str(error), forbidden=error.status == FORBIDDEN)
    except (KubeError, OSError) as error:
        return Nudged((), str(error))


def describe(pods: Iterable[WaitingPod]) -> str:
    """``ns/a, ns/b and 3 more``: one line for a burst."""
    names = [f"{pod.namespace}/{pod.name}" for pod in pods]
    shown = ", ".join(names[:LOGGED_PODS])
    more = len(names) - LOGGED_PODS
    return shown + (f" and {more} more" if more > 0 else "")
