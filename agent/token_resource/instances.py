"""Whether this agent may run beside another instance of itself, as a DaemonSet rolling with
``maxSurge: 1`` runs two on a node for a moment, or must be alone there.

Two instances are safe only for DRA, and only with a 1.33+ kubelet: it keeps a plugin per
registration socket, calls the newest connected one and keeps the driver while either is
there; the instances share the prepared claims under a lock (dra.prepared). A kubelet before
1.33 keeps one plugin per driver and drops the driver when either instance leaves; device-plugin
endpoints are keyed by resource name, so two instances would take each other's place; and the
Node's capacity goes to whichever patched it last. An agent that must be alone holds the
device-plugin directory's lock (host.lock): started for a rollout it waits there, answering
``status`` (the rollout goes on once it is ready, and the old instance then leaves), else it
refuses to start beside another.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from token_resource.apiserver.client import ApiClient, KubeError
from token_resource.apiserver.credentials import load_credentials, node_name
from token_resource.apiserver.node import kubelet_version
from token_resource.config.model import DRA, Config, KubernetesSettings
from token_resource.host.lock import DirectoryLock, LockError
from token_resource.observe.report import InstanceReport

log = logging.getLogger(__name__)

# Set by the DaemonSet to its pod's UID (the downward API): this agent is one of the instances
# a rollout may run side by side.
INSTANCE_VARIABLE = "TOKEN_RESOURCE_INSTANCE"
SIDE_BY_SIDE_SINCE = (1, 33)
# Reading the kubelet's version delays the first registration: briefly, or not at all.
VERSION_TIMEOUT = 3.0


@dataclass(frozen=True)
class InstancePlan:
    # $TOKEN_RESOURCE_INSTANCE; None for an agent that is always alone (the host's service).
    instance: str | None
    # May serve beside another instance (its DRA sockets named after ``instance``).
    beside: bool
    reason: str

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
    def dra_instance(self) -> str | None:
        """The instance to name the DRA sockets after; None for the fixed names."""
        return self._plan.instance if self._plan.beside else None

    async def plan(self, config: Config) -> None:
        """Decide from the first configuration; an agent that is always alone takes the lock
        now (LockError if another agent has it)."""
        self._plan = await plan_instances(config)
        if self._plan.instance is None:
            self._lock.acquire()
        else:
            log.info("instance %s: %s", self._plan.instance, self._plan.reason)

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
        needs = alone_because(config)
        if needs is None or self._lock.held:
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


def alone_because(config: Config) -> str | None:
    """Why ``config`` needs the agent alone on the node; None if DRA is all it serves."""
    dra = config.advertised_by(DRA).resources
    others = sorted(name for name in config.resources if name not in dra)
    if others:
        return f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not served by DRA"
    return None


async def plan_instances(config: Config, environ: Mapping[str, str] = os.environ) -> InstancePlan:
    instance = environ.get(INSTANCE_VARIABLE) or None
    if instance is None:
        return InstancePlan(None, False, f"alone: one agent per node (no ${INSTANCE_VARIABLE})")
    problem = alone_because(config)
    if problem is None and not config.resources:
        problem = "no resources yet"
    if problem is None:
        problem = await _kubelet_problem(config.kubernetes)
    if problem is not None:
        return InstancePlan(instance, False, f"alone, one instance at a time: {problem}")
    return InstancePlan(instance, True, "beside another instance during a rollout (DRA only)")


async def _kubelet_problem(settings: KubernetesSettings) -> str | None:
    """Why the node's kubelet cannot take two instances of a driver; None if it can."""

    def read() -> tuple[str, tuple[int, int] | None]:
        with ApiClient(load_credentials(settings), timeout=VERSION_TIMEOUT) as client:
            return kubelet_version(client, node_name(settings))

    try:
        text, version = await asyncio.to_thread(read)
    except (KubeError, OSError) as error:
        return f"the kubelet's version is unknown ({error})"
    if version is None:
        return f"the kubelet's version {text!r} is not one"
    if version < SIDE_BY_SIDE_SINCE:
        return f"kubelet {text} keeps one plugin per DRA driver (two from 1.33)"
    log.info(
        "kubelet %s takes two instances of a DRA driver: this one may run beside another", text
    )
    return None
