"""The composition root: builds the agent's parts, runs its event loop, and shuts it down.

Data flows one way: file → validated config → diff → plugin servers → kubelet. Everything runs
on one asyncio loop; watchdog's thread and signal handlers only hand events to it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from token_resource.apiserver.keeping.node_capacity import NodeStatusAdvertiser
from token_resource.config.diff import ConfigDiff, describe_diff, diff_configs
from token_resource.config.errors import ConfigError
from token_resource.config.follow import ConfigFollower
from token_resource.config.load import load_reload
from token_resource.config.model import (
    DEVICE_PLUGIN,
    DRA,
    NODE_SCOPE,
    NODE_STATUS,
    Config,
    ResourceSpec,
)
from token_resource.dra.driver import DraDriver
from token_resource.dra.prepared import claims_on_record
from token_resource.health.monitor import HealthMonitor
from token_resource.health.state import TokenHealth
from token_resource.host.control import Answer, ControlServer
from token_resource.host.fswatch import DirectoryWatcher, FileEvent
from token_resource.host.handover import Predecessor
from token_resource.host.notify import SystemdNotifier
from token_resource.host.winddown import wind_down
from token_resource.instances import Placement
from token_resource.kubelet.reconciler import Reconciler
from token_resource.kubelet.sockets import (
    remove_stale_sockets,
    remove_subdirectory,
)
from token_resource.observe.observer import APPLIED, FAILED, REJECTED, NullObserver, Observer
from token_resource.observe.report import StatusReport
from token_resource.succession import Succession
from token_resource.summary import STATUS_LISTED, status_line, status_report

if TYPE_CHECKING:
    from token_resource.observe.exposition import Exposition

log = logging.getLogger(__name__)

# Registering N resources changes the status 2N times: build and send it once per burst.
STATUS_DELAY_SECONDS = 0.05
# How long the loop may take, after every server has stopped, to end gRPC's own tasks.
WIND_DOWN_SECONDS = 2.0


class StartError(Exception):
    """Something configured could not start: a resource, or the metrics listener."""


class Agent:
    # Whether ``handover`` starts a successor (the node's agent; the publisher's lease passes).
    HANDS_OVER = True

    def __init__(
        self,
        config: Config,
        config_path: Path,
        control_socket: Path,
        notifier: SystemdNotifier,
        predecessor: Predecessor | None = None,
    ) -> None:
        """Construct inside the running loop (Python 3.9's asyncio primitives bind to it).
        ``predecessor``: the running agent this one takes over from (a package upgrade)."""
        self._initial = config
        # Nothing is served until run() applies the initial config as a diff from nothing.
        self._config = Config(
            agent=config.agent,
            resources=MappingProxyType({}),
            files=(),
            metrics=config.metrics,
            dra=config.dra,
        )
        self._config_path = config_path
        self._notifier = notifier
        self._control = ControlServer(control_socket, self._on_control)
        self._observer: Observer = NullObserver()
        # Only built when metrics are configured: the library is imported only then.
        self._exposition: Exposition | None = None
        if config.metrics.enabled:
            from token_resource.observe.exposition import Exposition  # noqa: PLC0415
            from token_resource.observe.metrics import Metrics  # noqa: PLC0415

            metrics = Metrics(asyncio.get_running_loop(), self.report)
            self._observer = metrics
            self._exposition = Exposition(config.metrics, metrics.registry)
        self._watcher = DirectoryWatcher(asyncio.get_running_loop(), self._on_file_event)
        self._reconciler = Reconciler(
            config.agent.device_plugin_dir,
            self._publish_status,
            self._observer,
            self._watcher.watch,
        )
        self._follower = ConfigFollower(
            config_path,
            self._watcher,
            lambda: self._spawn(self.reload("file changed")),
            self._reconciler.directories,
        )
        # Tokens in use per resource, from the latest read of the kubelet's PodResources API
        # (for the STATUS= line); None when the last read failed or none was made yet.
        self._in_use: dict[str, int] | None = None
        # Only built once the config uses the API server (Config.uses_api_server).
        self._advertiser: NodeStatusAdvertiser | None = None
        # Only started once the config has a DRA resource.
        self._dra: DraDriver | None = None
        self._monitor = HealthMonitor(self._health_changed, self._observer)
        self._readvertising = False
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._pending_status: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._last_error: str | None = None
        self._place = Placement(config.agent.device_plugin_dir)
        self._succession = Succession(predecessor, notifier, self._place)
        # What the journal says the agent does as it stops.
        self._stopping = "removing sockets"

    async def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then remove every socket of ours."""
        loop = asyncio.get_running_loop()
        try:
            # A successor opens what only one agent may once its predecessor has left.
            if not self._succession.taking_over:
                await self._control.start()
            self._install_signal_handlers(loop)
            # Reloads wait too: nothing is served before the agent has its place.
            async with self._reload_lock:
                if not await self._take_place():
                    return
            # Before any plugin registers: a listen address in use ends the start at once.
            if not self._succession.taking_over:
                self._start_exposition()
            self._follower.refresh()
            self._watcher.start()
            # Under the reload lock, as every apply: a probe's first check may end
            # meanwhile, and its change of health is advertised once this is done.
            async with self._reload_lock:
                _, failures = await self._apply(self._initial)
            if failures:
                raise StartError("; ".join(failures))
            await self._take_over()
            self._observer.config_applied(APPLIED, initial=True)
            status = self._status()
            self._notifier.ready(status)
            log.info("ready: %s", status)
            if self._notifier.watchdog_interval is not None:
                self._spawn(self._ping_watchdog(self._notifier.watchdog_interval))
            await self._stop.wait()
            self._notifier.stopping()
            log.info("stopping: %s", self._stopping)
        finally:
            await self._shut_down(loop)
            self._place.release()

    async def _take_place(self) -> bool:
        """Take the agent's place on the node (alone, or beside another instance of a
        rollout); False when stopped while waiting for it."""
        directory = self._config.agent.device_plugin_dir
        directory.mkdir(parents=True, exist_ok=True)
        await self._place.plan(self._initial)
        if self._place.waits:  # a successor that may not serve beside its predecessor
            await self._take_over()
        if not await self._place.take(self._stop):
            return False
        self._reconciler.name_sockets_after(self._place.instance)
        # Beside another instance, the live sockets there are the other's.
        remove_stale_sockets(directory, only_dead=not self._place.alone)
        self._reconciler.watch_directories()
        return True

    async def _take_over(self) -> None:
        await self._succession.take_over(self._kubelet_has_all, self._open_exclusive)

    def _kubelet_has_all(self) -> bool:
        """Whether the kubelet has registered every resource going through it (or is not
        there)."""
        plugins = self._reconciler.summary(0)
        dra = self._dra is None or bool(self._dra.state().registered)
        has_all = plugins.registered == plugins.total and dra
        return has_all or not self._reconciler.kubelet_expected()

    async def _open_exclusive(self) -> None:
        """What only one agent on the node may open: a successor's, once its predecessor left."""
        await self._control.start()
        self._start_exposition()

    def _leave(self, why: str) -> None:
        self._stopping = f"{why}, removing sockets"
        self.request_stop()

    def _start_exposition(self) -> None:
        if self._exposition is None:
            return
        try:
            self._exposition.start()
        except OSError as error:
            raise StartError(f"metrics: cannot listen: {error.strerror or error}") from None

    def request_stop(self) -> None:
        self._stop.set()

    async def reload(self, trigger: str) -> Answer:
        """Apply the files if they are valid; otherwise keep serving what runs and say why."""
        async with self._reload_lock:
            self._notifier.reloading()
            try:
                return await self._reload(trigger)
            finally:
                # The files may now resolve through other links and directories.
                self._follower.refresh()
                self._notifier.ready(self._status())

    async def _reload(self, trigger: str) -> Answer:
        try:
            config = load_reload(
                self._config_path, self._config.agent, self._config.metrics, self._config.dra
            )
        except ConfigError as error:
            self._last_error = str(error)
            log.error("reload (%s) rejected, the previous configuration stays: %s", trigger, error)
            self._observer.config_applied(REJECTED, initial=False)
            return False, str(error)
        problem = self._admit(config)
        if problem is not None:
            self._last_error = problem
            log.error("reload (%s) refused, the previous configuration stays: %s", trigger, problem)
            self._observer.config_applied(REJECTED, initial=False)
            return False, problem
        diff, failures = await self._apply(config)
        self._last_error = "; ".join(failures) or None
        self._observer.config_applied(FAILED if failures else APPLIED, initial=False)
        described = describe_diff(diff)
        log.info("reload (%s): %s", trigger, described)
        if failures:
            return False, "; ".join(failures)
        return True, described

    def _admit(self, config: Config) -> str | None:
        """Why a valid configuration cannot be served where the agent is, or None."""
        problem, taken = self._place.admit(config)
        if taken:  # the other instance has left; its sockets too, unless it was killed
            remove_stale_sockets(self._config.agent.device_plugin_dir, only_dead=True)
        return problem

    async def _apply(self, config: Config) -> tuple[ConfigDiff, list[str]]:
        """Probe what the configuration says to probe, then advertise it."""
        self._monitor.apply(self._probed(config))
        failures = await self._advertise(config)
        diff, self._config = diff_configs(self._config, config), config
        return diff, failures

    def _probed(self, config: Config) -> Mapping[str, ResourceSpec]:
        """The resources whose probes this agent runs: a node's, not the cluster pools' (the
        publisher runs those)."""
        return config.scoped(NODE_SCOPE).resources

    async def _advertise(self, config: Config) -> list[str]:
        """Hand each resource, with its tokens' health, to what advertises it: the device
        plugins, DRA or the Node status. The one path from the files and the probes to the
        servers: a reload and a change of health both take it."""
        health = {name: self._monitor.health(name) for name in config.resources}
        device_plugins = config.advertised_by(DEVICE_PLUGIN).resources
        failures = await self._reconciler.apply(device_plugins, health)
        failures += await self._apply_dra(config, health)
        node_status = {
            name: health[name].healthy_count(spec.count)
            for name, spec in config.advertised_by(NODE_STATUS).resources.items()
        }
        if config.manages_node_status and self._advertiser is None:
            self._advertiser = NodeStatusAdvertiser(config.kubernetes, self._publish_status)
        if self._advertiser is not None:
            self._advertiser.apply(config.kubernetes, node_status)
        return failures

    def _health_changed(self, resource: str) -> None:
        """A probe changed its resource's health: advertise it, once for changes together."""
        if not self._readvertising:
            self._readvertising = True
            self._spawn(self._readvertise())

    async def _readvertise(self) -> None:
        async with self._reload_lock:
            self._readvertising = False
            for failure in await self._advertise(self._config):
                log.error("after a change of health: %s", failure)
        self._publish_status()

    async def _apply_dra(self, config: Config, health: Mapping[str, TokenHealth]) -> list[str]:
        resources = config.advertised_by(DRA).resources
        if self._dra is None and not resources:
            left = claims_on_record(config.dra.driver_dir)
            if not left:
                return []
            log.info("DRA driver %s: serving %d claim(s) prepared before", config.dra.driver, left)
        if self._dra is None:
            try:
                self._dra = await DraDriver.started(
                    config.dra,
                    config.kubernetes,
                    self._observer,
                    self._publish_status,
                    self._place.instance,
                )
            except (OSError, RuntimeError) as error:
                log.error("DRA driver %s: cannot serve: %s", config.dra.driver, error)
                return [f"DRA driver {config.dra.driver}: cannot serve: {error}"]
        self._dra.apply(config.kubernetes, resources, health)
        return []

    def _on_file_event(self, event: FileEvent) -> None:
        if event.kind in ("opened", "closed_no_write"):
            return
        self._reconciler.on_file_event(event)
        self._follower.on_file_event(event)

    async def _on_control(self, command: str) -> Answer:
        if command == "reload":
            return await self.reload("reload command")
        if command == "handover":
            if not self.HANDS_OVER:
                return False, "the publisher hands over by its lease: restart it"
            return await self._succession.hand_over(self._leave)
        return True, json.dumps((await self.report()).to_json())

    async def report(self) -> StatusReport:
        """What ``status`` and the metrics show, with a fresh read of who holds the tokens."""
        dra = self._dra.state() if self._dra is not None else None
        report, in_use = await status_report(
            self._status(), self._reconciler, self._config, dra, self._monitor.reports()
        )
        if in_use != self._in_use:
            self._in_use = in_use
            self._publish_status()
        return replace(report, instance=self._place.report())

    def _install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> None:
        # Handlers only record the signal; the loop does the work.
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload("SIGHUP")))
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(stop_signal, self.request_stop)

    async def _ping_watchdog(self, interval: float) -> None:
        # From the loop itself: if the loop hangs, the pings stop and systemd restarts us.
        while True:
            self._notifier.watchdog()
            await asyncio.sleep(interval)

    def _spawn(self, coroutine: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _publish_status(self) -> None:
        """Send STATUS= soon: at most once per STATUS_DELAY however many changes come."""
        if self._pending_status is None:
            self._pending_status = asyncio.get_running_loop().call_later(
                STATUS_DELAY_SECONDS, self._send_status
            )

    def _send_status(self) -> None:
        self._pending_status = None
        self._notifier.status(self._status())

    def _status(self) -> str:
        """One line for ``systemctl status``: resources, registration, the last config error."""
        return status_line(
            self._reconciler.summary(STATUS_LISTED),
            self._reconciler.kubelet_present(),
            self._in_use,
            self._advertiser.state_of_node() if self._advertiser is not None else None,
            self._dra.state() if self._dra is not None else None,
            self._last_error,
        )

    async def _shut_down(self, loop: asyncio.AbstractEventLoop) -> None:
        for stop_signal in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(stop_signal)
        self._watcher.stop()
        await self._monitor.close()
        self._follower.cancel()
        if self._pending_status is not None:
            self._pending_status.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._control.close()
        if self._exposition is not None:
            await self._exposition.close()
        await self._close_servers()
        self._succession.left()
        await wind_down(WIND_DOWN_SECONDS)

    async def _close_servers(self) -> None:
        """Stop serving the kubelet and the API server."""
        await self._reconciler.close()
        if self._place.alone and self._succession.successor is None:
            remove_subdirectory(self._config.agent.device_plugin_dir)
        if self._dra is not None:
            await self._dra.close()
        if self._advertiser is not None:
            # The Node keeps its capacity: stopping or upgrading must not take tokens away.
            await self._advertiser.close()
