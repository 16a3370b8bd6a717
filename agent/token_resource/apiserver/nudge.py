"""Asking the kubelet to prepare, now, the pods it could not prepare while the driver was away.

A kubelet (1.36) that finds a pod's DRA driver not registered records
``FailedPrepareDynamicResources`` and tries the pod again only at its next periodic resync, a
minute later (with up to 50 % jitter), not after its error back-off; but it syncs a pod at once
when the pod's annotations change. After a node's reboot a DaemonSet's driver registers after
the kubelet has tried its pods, which would then wait that minute. So once the driver has
registered, the agent lists the ResourceClaims, takes those allocated from its node's pools,
reserved for pods and not prepared by it, and changes one annotation of each such pod
(``<driver>/prepare-retry``, the time). It never reads pods: the claims name them. The
DaemonSet's ServiceAccount may patch pods, and its admission policy lets it change only that
annotation, only on pods of its own node; a node's own credentials (the host's service, whose
driver registers before the kubelet starts) may not patch pods, and then nothing changes.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from token_resource.apiserver.client import ApiClient, ApiError, KubeError
from token_resource.apiserver.credentials import load_credentials
from token_resource.apiserver.slices import API_VERSION
from token_resource.config.model import KubernetesSettings

log = logging.getLogger(__name__)

ANNOTATION = "prepare-retry"  # under the driver's name: <driver>/prepare-retry
FORBIDDEN = 403
# Pods a log line names before it says "and N more".
LOGGED_PODS = 5
# A node's reboot nudges all its token pods at once: at most this many patches a second.
PATCHES_PER_SECOND = 50


@dataclass(frozen=True, order=True)
class WaitingPod:
    namespace: str
    name: str


def waiting_pods(
    claims: Iterable[Mapping[str, Any]],
    driver: str,
    pools: Collection[str],
    prepared: Collection[str],
) -> list[WaitingPod]:
    """The pods that claims allocated from ``pools`` of ``driver`` are reserved for, where the
    claim is not among ``prepared`` (claim UIDs): each once, in order."""
    pods: set[WaitingPod] = set()
    for claim in claims:
        metadata, status = claim.get("metadata") or {}, claim.get("status") or {}
        if metadata.get("uid") in prepared:
            continue
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not any(
            isinstance(result, dict)
            and result.get("driver") == driver
            and result.get("pool") in pools
            for result in results
        ):
            continue
        pods.update(
            WaitingPod(str(metadata.get("namespace")), str(consumer.get("name")))
            for consumer in status.get("reservedFor") or []
            if isinstance(consumer, dict) and consumer.get("resource") == "pods"
        )
    return sorted(pods)


@dataclass(frozen=True)
class Nudged:
    pods: tuple[WaitingPod, ...]  # the pods whose annotation was changed
    # Why nothing could be asked (no permission, unreachable); None when it was.
    problem: str | None = None
    forbidden: bool = False


def nudge_waiting_pods(
    settings: KubernetesSettings, driver: str, pools: Collection[str], prepared: Collection[str]
) -> Nudged:
    """Change the annotation of every pod waiting for a prepare of ``driver`` on this node.
    Blocking, for a worker thread."""
    try:
        with ApiClient(load_credentials(settings)) as client:
            listed = client.get(f"/apis/{API_VERSION}/resourceclaims")
            waiting = waiting_pods(listed.get("items") or [], driver, pools, prepared)
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
