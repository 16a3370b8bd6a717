"""Whether this agent may run beside another instance of itself, as a DaemonSet rolling with
``maxSurge: 1`` runs two on a node for a moment, or must be alone there.

Two instances are safe where the node's kubelet keeps a registration per socket and hands over
to the survivor: for DRA from 1.33 (a plugin per registration socket, the newest connected one
called, the driver kept while either is there; the instances share the prepared claims under a
lock, dra.prepared), for device plugins from 1.37 (endpoints keyed by resource and socket path,
the newest one called, the resource kept while either is connected). Each instance then names
its sockets after itself. The Node's status needs no kubelet: both instances patch the same
counts and neither takes them away when it stops. The kubelet's version comes from its Node
(``status.nodeInfo.kubeletVersion``). An older kubelet keeps one plugin per driver or one
endpoint per resource, and drops it when either instance leaves: an agent that must be alone
holds the device-plugin directory's lock (host.lock). Started for a rollout it waits there,
answering ``status`` (the rollout goes on once it is ready, and the old instance then leaves),
else it refuses to start beside another.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from token_resource.apiserver.connection.client import ApiClient, KubeError
from token_resource.apiserver.connection.credentials import load_credentials, node_name
from token_resource.apiserver.objects.node import kubelet_version
from token_resource.config.model import DEVICE_PLUGIN, DRA, Config, KubernetesSettings
from token_resource.host.lock import DirectoryLock, LockError
from token_resource.observe.report import InstanceReport

log = logging.getLogger(__name__)

# Set by the DaemonSet to its pod's UID (the downward API): this agent is one of the instances
# a rollout may run side by side.
INSTANCE_VARIABLE = "TOKEN_RESOURCE_INSTANCE"
# The advertise modes that go through the kubelet, the first release that takes two instances
# of a plugin, and what an older one keeps instead.
SIDE_BY_SIDE_SINCE = (
    (DRA, (1, 33), "one plugin per DRA driver"),
    (DEVICE_PLUGIN, (1, 37), "one endpoint per device-plugin resource"),
)
# Reading the kubelet's version delays the first registration: briefly, or not at all.
VERSION_TIMEOUT = 3.0


@dataclass(frozen=True)
class KubeletVersion:
    text: str  # as the Node says it: "v1.37.2"
    release: tuple[int, int] | None  # None when ``text`` is not a version


@dataclass(frozen=True)
class InstancePlan:
    # $TOKEN_RESOURCE_INSTANCE; None for an agent that is always alone (the host's service).
    instance: str | None
    # May serve beside another instance (its sockets named after ``instance``).
    beside: bool
    reason: str
    # Read for an instance that may be beside another: what a reload may then serve.
    kubelet: KubeletVersion | None = None

    @property
    def waits(self) -> bool:
        """An agent of a rollout that must be alone waits for the other to leave."""
        return self.instance is not None and not self.beside


class Placement:
    """The agent's place on the node: alone (holding the lock) or beside another instance."""

    def __init__(self, device_plugin_dir: Path) -> None:
        self._lock = DirectoryLock(device_plugin_dir)
        self._plan = InstancePlan(None, False, "alone")
        self._waiting_for: str | None = None

    @property
    def alone(self) -> bool:
        """Holding the node's lock: the device-plugin directory is this agent's."""
        return self._lock.held

    @property
    def instance(self) -> str | None:
        """The instance to name the sockets after; None for the fixed names."""
        return self._plan.instance if self._plan.beside else None

    async def plan(self, config: Config) -> None:
        """Decide from the first configuration; an agent that is always alone takes the lock
        now (LockError if another agent has it)."""
        self._plan = await plan_instances(config)
        if self._plan.instance is None:
            self._lock.acquire()
        else:
            log.info("instance %s: %s", self._plan.instance, self._plan.reason)

    @property
    def waits(self) -> bool:
        """Whether this agent may serve only once the other instance has left."""
        return self._plan.waits

    def settle(self) -> None:
        """Once the other instance has left: take the lock (a handover's successor is then
        alone, as the service it now is)."""
        try:
            self._lock.acquire()
        except LockError as error:
            log.warning("still beside another agent: %s", error)

    async def take(self, stop: asyncio.Event) -> bool:
        """Wait, if it must, for the other instance to leave; False if stopped first."""
        if not self._plan.waits:
            return True

        def waiting(holder: str) -> None:
            self._waiting_for = holder
            log.info("waiting for the other instance to leave: %s", holder)

        alone = asyncio.ensure_future(self._lock.wait(waiting))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({alone, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (alone, stopped):
            task.cancel()
        self._waiting_for = None
        return self._lock.held

    def admit(self, config: Config) -> tuple[str | None, bool]:
        """(why ``config`` cannot be served here, whether the lock was just taken for it): an
        agent beside another instance takes what needs it alone only if it is alone now."""
        if self._lock.held or self._plan.kubelet is None:
            return None, False
        needs = alone_because(config, self._plan.kubelet)
        if needs is None:
            return None, False
        try:
            self._lock.acquire()
        except LockError as error:
            return f"{needs}, which needs the agent alone on the node, and {error}", False
        return None, True

    def report(self) -> InstanceReport:
        plan = self._plan
        return InstanceReport(plan.instance, plan.beside, plan.reason, self._waiting_for)

    def release(self) -> None:
        self._lock.release()


def alone_because(config: Config, kubelet: KubeletVersion) -> str | None:
    """Why serving ``config`` beside another instance would lose resources on ``kubelet``;
    None if it would not."""
    for mode, since, older_keeps in SIDE_BY_SIDE_SINCE:
        names = sorted(config.advertised_by(mode).resources)
        if names and (kubelet.release is None or kubelet.release < since):
            served = f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} served by {mode}"
            if kubelet.release is None:
                return f"{served}, and the kubelet's version {kubelet.text!r} is not one"
            several = f"several from {since[0]}.{since[1]}"
            return f"{served}, and kubelet {kubelet.text} keeps {older_keeps} ({several})"
    return None


async def plan_instances(config: Config, environ: Mapping[str, str] = os.environ) -> InstancePlan:
    instance = environ.get(INSTANCE_VARIABLE) or None
    if instance is None:
        return InstancePlan(None, False, f"alone: one agent per node (no ${INSTANCE_VARIABLE})")
    if not config.resources:
        return InstancePlan(instance, False, "alone, one instance at a time: no resources yet")
    try:
        kubelet = await _read_kubelet_version(config.kubernetes)
    except (KubeError, OSError) as error:
        reason = f"alone, one instance at a time: the kubelet's version is unknown ({error})"
        return InstancePlan(instance, False, reason)
    problem = alone_because(config, kubelet)
    if problem is not None:
        return InstancePlan(instance, False, f"alone, one instance at a time: {problem}", kubelet)
    log.info(
        "kubelet %s takes two instances of a plugin: this one may run beside another", kubelet.text
    )
    return InstancePlan(
        instance,
        True,
        f"beside another instance during a rollout (kubelet {kubelet.text})",
        kubelet,
    )


async def _read_kubelet_version(settings: KubernetesSettings) -> KubeletVersion:
    """The version the node's kubelet wrote into its Node; KubeError or OSError if unread."""

    def read() -> KubeletVersion:
        with ApiClient(load_credentials(settings), timeout=VERSION_TIMEOUT) as client:
            return KubeletVersion(*kubelet_version(client, node_name(settings)))

    return await asyncio.to_thread(read)
