"""The kubelet's pod sync for pods that hold ResourceClaims, for the kubelet stand-in's DRA side:
when a pod bound to the node gets its claims prepared, and when it waits.

The source (pkg/kubelet/config/apiserver.go, ``NewSourceApiserver``): the pods of the node,
listed and then watched from the API server with ``fieldSelector=spec.nodeName=<node>`` and the
node's own credentials; after a watch ends (or a 410) it lists again. A watch, as the real one,
so that a change reaches the pod worker at once (polling would put a poll period between the
change and the sync, and fill the API server's request log).

What makes a sync (kubelet.go ``syncLoopIteration`` and ``HandlePodAdditions`` /
``HandlePodUpdates``, pod_workers.go ``UpdatePod``): a pod's arrival; a change that
config/config.go ``podsDifferSemantically`` sees (spec, labels, deletionTimestamp,
deletionGracePeriodSeconds, annotations but the kubelet's local ones, ``isLocalAnnotationKey``)
syncs it at once; a change of anything else, e.g. its status, does not (``checkAndUpdatePod``:
a reconcile, no sync); and the periodic resync, ``sync_frequency`` seconds (``syncFrequency``,
1 min) after the end of each sync, ``+ up to 50 %`` when ``jitter`` is on (pod_workers.go
``completeWork``: ``wait.Jitter(resyncInterval, workerResyncIntervalJitterFactor)``).

A sync prepares the pod's claims (kuberuntime/kuberuntime_manager.go ``SyncPod`` calls
``PrepareDynamicResources``; cm/dra/manager.go ``prepareResources``): its claims are those of
``spec.resourceClaims[].resourceClaimName``, of ``status.resourceClaimStatuses`` (claims made
from templates) and ``status.extendedResourceClaimStatus.resourceClaimName`` (the unchanged
pod's, DRAExtendedResource); each is read from the API server ("fetch ResourceClaim <name>:
..."), must be reserved for the pod ("pod <p> (<uid>) is not allowed to use ResourceClaim <c>
(<uid>)"), and its allocation's results go, per driver, to that driver's NodePrepareResources
through the DRA manager (kubelet_dra.py, which answers "DRA driver <d> is not registered").
A failure is recorded as the event ``FailedPrepareDynamicResources`` ("Failed to prepare
dynamic resources: prepare dynamic resources: <error>") and SyncPod returns WITHOUT an error,
so the pod worker does not back off (10 s) but waits for the next resync or semantic change.
A prepared pod stays prepared (the claim info cache: later syncs call no plugin).
Not modelled: the sandbox and containers, unprepare when a pod goes, a restart's checkpoint.
"""

from __future__ import annotations

import copy
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from tests.standin.kubelet_dra import CALL_SECONDS, ApiAccess, DraManager

FAILED_PREPARE = "FailedPrepareDynamicResources"  # events.FailedPrepareDynamicResources
SYNC_FREQUENCY = 60.0
JITTER_FACTOR = 0.5  # workerResyncIntervalJitterFactor
RELIST_DELAY = 1.0  # after a failed list
# The kubelet's own annotations (config.go localAnnotations), no semantic change.
_LOCAL_ANNOTATIONS = (
    "kubernetes.io/config.source",
    "kubernetes.io/config.mirror",
    "kubernetes.io/config.seen",
)
_CLAIMS = "/apis/resource.k8s.io/v1"
_WATCH_SECONDS = 300  # a watch's timeoutSeconds; it is then opened again from where it was


@dataclass(frozen=True)
class PodSource:
    """Where the kubelet stand-in reads its node's pods: the API server, with the node's
    credentials (``access``); how often it resyncs each pod, and whether with jitter."""

    access: ApiAccess
    sync_frequency: float = SYNC_FREQUENCY
    jitter: bool = False


@dataclass(frozen=True)
class PodEvent:
    at: float  # time.monotonic()
    reason: str
    message: str


@dataclass(frozen=True)
class PodSyncView:
    """One pod with claims as the kubelet's pod worker has it."""

    namespace: str
    name: str
    uid: str
    resource_version: str  # of the latest version the kubelet received
    syncs: tuple[float, ...] = ()  # time.monotonic() of each sync's start
    events: tuple[PodEvent, ...] = ()
    prepared_at: float | None = None  # when its claims' NodePrepareResources succeeded
    next_sync_at: float | None = None  # the periodic resync due, None while one is running

    @property
    def failed_prepares(self) -> tuple[PodEvent, ...]:
        return tuple(e for e in self.events if e.reason == FAILED_PREPARE)


class PodWorkers:
    """The pod source and the pod workers, under the kubelet stand-in's lock (``cond``)."""

    def __init__(
        self,
        cond: threading.Condition,
        changed: Callable[[str], None],
        dra: DraManager,
        node: str,
        source: PodSource,
    ) -> None:
        self._cond, self._changed, self._dra = cond, changed, dra
        self.node, self.source = node, source
        # Guarded by cond:
        self._pods: dict[str, dict[str, Any]] = {}  # the latest version received, by key
        self._views: dict[str, PodSyncView] = {}
        self._due: dict[str, float] = {}  # key -> when it syncs (now: at once)
        self._generation = 0
        self._threads: list[threading.Thread] = []
        self._watch: socket.socket | None = None

    def start(self) -> None:
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._pods.clear()
            self._due.clear()
            self._threads = [
                threading.Thread(target=target, args=(generation,), name=name)
                for target, name in (
                    (self._run_source, "kubelet-pod-source"),
                    (self._run_workers, "kubelet-pod-workers"),
                )
            ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        with self._cond:
            self._generation += 1
            threads, self._threads = self._threads, []
            watch, self._watch = self._watch, None
            self._cond.notify_all()
        if watch is not None:
            watch.shutdown(socket.SHUT_RDWR)  # ends the source's blocking read
        for thread in threads:
            thread.join()

    def snapshot(self) -> Mapping[str, PodSyncView]:
        """Caller holds the lock."""
        return dict(self._views)

    # --- the source ---------------------------------------------------------------------------

    def _run_source(self, generation: int) -> None:
        selector = quote(f"spec.nodeName={self.node}")
        while self._current(generation):
            try:
                status, listing = self.source.access.request(
                    "GET", f"/api/v1/pods?fieldSelector={selector}"
                )
            except OSError:  # the API server is not there (yet): the reflector retries
                status, listing = 0, None
            if status != 200:
                with self._cond:
                    self._cond.wait(RELIST_DELAY)
                continue
            with self._cond:
                listed = {_key(pod): pod for pod in listing["items"]}
                for key in set(self._pods) - set(listed):
                    self._forget(key)
                for pod in listed.values():
                    self._received(pod)
            since = listing["metadata"]["resourceVersion"]
            while since and self._current(generation):
                since = self._watch_from(generation, selector, since)

    def _watch_from(self, generation: int, selector: str, since: str) -> str:
        """One watch; the resourceVersion to watch on from, or "" to list again."""
        path = (
            f"/api/v1/pods?watch=true&fieldSelector={selector}&resourceVersion={since}"
            f"&timeoutSeconds={_WATCH_SECONDS}"
        )
        connection = self.source.access.connection(timeout=None)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            if response.status != 200:
                return ""
            with self._cond:
                if not self._current(generation):
                    return ""
                self._watch = connection.sock
            for line in response:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return ""
                pod = event["object"]
                since = pod["metadata"]["resourceVersion"]
                with self._cond:
                    if event["type"] == "DELETED":
                        self._forget(_key(pod))
                    else:
                        self._received(pod)
            return since
        except OSError:
            return ""
        finally:
            with self._cond:
                self._watch = None
            connection.close()

    def _received(self, pod: dict[str, Any]) -> None:
        """Caller holds the lock: HandlePodAdditions / HandlePodUpdates for a pod with claims."""
        key = _key(pod)
        if not _claims_of(pod):
            return
        old = self._pods.get(key)
        self._pods[key] = pod
        metadata = pod["metadata"]
        view = self._views.get(key)
        if view is None or view.uid != metadata["uid"]:
            view = PodSyncView(metadata["namespace"], metadata["name"], metadata["uid"], "")
        self._views[key] = replace(view, resource_version=metadata["resourceVersion"])
        if old is None or old["metadata"]["uid"] != metadata["uid"]:
            self._due[key] = time.monotonic()
            self._changed(f"pod {key} added: syncing it")
        elif differ_semantically(old, pod):
            self._due[key] = time.monotonic()
            self._changed(f"pod {key} changed: syncing it at once")
        else:
            self._changed(f"pod {key} changed, not semantically: no sync")

    def _forget(self, key: str) -> None:
        self._pods.pop(key, None)
        self._due.pop(key, None)
        self._changed(f"pod {key} gone")

    # --- the workers --------------------------------------------------------------------------

    def _run_workers(self, generation: int) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._current(generation):
                        return
                    now = time.monotonic()
                    due = [key for key, at in self._due.items() if at <= now]
                    if due:
                        break
                    self._cond.wait(min(self._due.values(), default=now + 1.0) - now)
                key = min(due, key=self._due.__getitem__)
                del self._due[key]
                pod = copy.deepcopy(self._pods[key])
                view = self._views[key]
                self._views[key] = replace(view, syncs=(*view.syncs, now), next_sync_at=None)
                self._changed(f"pod {key}: sync")
            error = None if view.prepared_at is not None else self._prepare(pod)
            with self._cond:
                view = self._views[key]
                done = time.monotonic()
                if error is None and view.prepared_at is None:
                    view = replace(view, prepared_at=done)
                elif error is not None:
                    message = (
                        f"Failed to prepare dynamic resources: prepare dynamic resources: {error}"
                    )
                    view = replace(
                        view, events=(*view.events, PodEvent(done, FAILED_PREPARE, message))
                    )
                if key in self._pods and key not in self._due:  # completeWork: the resync
                    interval = self.source.sync_frequency
                    if self.source.jitter:
                        interval += random.random() * JITTER_FACTOR * interval
                    self._due[key] = done + interval
                    view = replace(view, next_sync_at=done + interval)
                self._views[key] = view
                self._changed(f"pod {key}: {'prepared' if error is None else error}")

    def _prepare(self, pod: dict[str, Any]) -> str | None:
        """manager.go prepareResources: None, or the error SyncPod reports in the event."""
        metadata = pod["metadata"]
        namespace = metadata["namespace"]
        batches: dict[str, list[tuple[str, str, str]]] = {}
        for name in _claims_of(pod):
            path = f"{_CLAIMS}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
            try:
                status, claim = self.source.access.request("GET", path)
            except OSError as error:
                return f"fetch ResourceClaim {name}: {error}"
            if status != 200:
                return f"fetch ResourceClaim {name}: {(claim or {}).get('message', status)}"
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            uid = claim["metadata"]["uid"]
            if not any(r.get("uid") == metadata["uid"] for r in reserved):
                return (
                    f"pod {metadata['name']} ({metadata['uid']}) is not allowed to use "
                    f"ResourceClaim {name} ({uid})"
                )
            results = ((claim["status"].get("allocation") or {}).get("devices") or {}).get(
                "results"
            )
            for driver in sorted({result["driver"] for result in results or ()}):
                batches.setdefault(driver, []).append((namespace, uid, name))
        for driver, claims in sorted(batches.items()):
            result = self._dra.call("NodePrepareResources", driver, claims, CALL_SECONDS)
            if result.error is not None:
                return result.error
        return None

    def _current(self, generation: int) -> bool:
        with self._cond:
            return self._generation == generation


def differ_semantically(existing: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    """config/config.go podsDifferSemantically (with isAnnotationMapEqual)."""
    old, new = existing.get("metadata") or {}, ref.get("metadata") or {}
    fields = ("labels", "deletionTimestamp", "deletionGracePeriodSeconds")
    return (
        existing.get("spec") != ref.get("spec")
        or any(old.get(field) != new.get(field) for field in fields)
        or _annotations(old) != _annotations(new)
    )


def _annotations(metadata: Mapping[str, Any]) -> dict[str, str]:
    annotations = metadata.get("annotations") or {}
    return {k: v for k, v in annotations.items() if k not in _LOCAL_ANNOTATIONS}


def _claims_of(pod: Mapping[str, Any]) -> list[str]:
    """The names of a pod's claims, as prepareResources finds them (resourceclaim.Name)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {
        s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()
    }
    names = []
    for claim in spec.get("resourceClaims") or ():
        name = claim.get("resourceClaimName") or generated.get(claim.get("name"))
        if name:
            names.append(name)
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.append(extended)
    return names


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
