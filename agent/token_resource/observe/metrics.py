"""The agent's Prometheus metrics: counted as things happen, or read from the report on scrape.

Imported only when ``[metrics]`` is configured. Label values are resource names (bounded by the
configuration) and fixed words, never pod names, so the number of series stays bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import platform
import time
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from token_resource import __version__
from token_resource.observe.observer import APPLIED, RESULTS
from token_resource.observe.report import ClusterPoolsReport, StatusReport

log = logging.getLogger(__name__)

# How long a scrape waits for the agent's report; the report itself gives the kubelet less.
REPORT_WAIT_SECONDS = 5.0
# Allocate answers in well under a millisecond; the top buckets show a stalled event loop.
ALLOCATE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
# A probe takes from a stat (microseconds) to a command that asks a license server (seconds).
PROBE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The registry, and the Observer that counts into it (called on the event loop).

    ``report`` is awaited on ``loop`` at every scrape, from the scraping thread, so that what is
    configured, registered and held is read when asked for and never kept up to date for nothing.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, report: Callable[[], Awaitable[StatusReport]]
    ) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        Info("token_resource_build", "The agent's version and Python", registry=registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self._reloads = Counter(
            "token_resource_reloads",
            "Reloads of the configuration by result: applied, rejected (the previous one "
            "stays), failed (valid, but a resource could not be served)",
            ["result"],
            registry=registry,
        )
        for result in RESULTS:
            self._reloads.labels(result)
        self._last_applied = Gauge(
            "token_resource_last_reload_success_timestamp_seconds",
            "When the configuration was last applied in full (at start or by a reload)",
            registry=registry,
        )
        # A rejected or failed reload leaves the previous configuration running: an alert
        # needs to know that the last attempt is not fixed yet, which the counters cannot say.
        self._last_reload_ok = Gauge(
            "token_resource_last_reload_successful",
            "1 when the last application of the configuration (at start or by a reload) "
            "succeeded, 0 while a rejected or failed one has not been followed by a success",
            registry=registry,
        )
        self._kubelet_restarts = Counter(
            "token_resource_kubelet_restarts",
            "Times kubelet.sock appeared while the agent ran (kubelet starts and restarts)",
            registry=registry,
        )
        self._registrations = Counter(
            "token_resource_registrations",
            "Successful registrations with the kubelet",
            ["resource"],
            registry=registry,
        )
        self._registration_failures = Counter(
            "token_resource_registration_failures",
            "Failed registration attempts (each is retried)",
            ["resource"],
            registry=registry,
        )
        self._allocate = Histogram(
            "token_resource_allocate_duration_seconds",
            "Allocate calls from the kubelet and how long they took, by result (ok, refused)",
            ["resource", "result"],
            buckets=ALLOCATE_BUCKETS,
            registry=registry,
        )
        self._claims = {
            action: Counter(
                f"token_resource_dra_{action}s",
                f"Claims the kubelet asked the DRA driver to {action}, by result (ok, failed)",
                ["result"],
                registry=registry,
            )
            for action in ("prepare", "unprepare")
        }
        self._prepares_retried = Counter(
            "token_resource_dra_prepare_retries",
            "Pods whose prepare the kubelet was asked to retry once the DRA driver registered",
            registry=registry,
        )
        self._probe_runs = Counter(
            "token_resource_probe_runs",
            "Checks of each resource's probe, by result (passed: every token; failed)",
            ["resource", "result"],
            registry=registry,
        )
        self._probe_duration = Histogram(
            "token_resource_probe_duration_seconds",
            "How long each check of a resource's probe took",
            ["resource"],
            buckets=PROBE_BUCKETS,
            registry=registry,
        )
        registry.register(_ReportCollector(loop, report))

    def config_applied(self, result: str, *, initial: bool) -> None:
        # Before the counter: a scrape reads the counter first, so one that sees this
        # result counted sees the gauge too.
        self._last_reload_ok.set(result == APPLIED)
        if not initial:
            self._reloads.labels(result).inc()
        if result == APPLIED:
            self._last_applied.set(time.time())

    def kubelet_appeared(self) -> None:
        self._kubelet_restarts.inc()

    def registered(self, resource: str) -> None:
        self._registrations.labels(resource).inc()

    def registration_failed(self, resource: str) -> None:
        self._registration_failures.labels(resource).inc()

    def allocate_answered(self, resource: str, seconds: float, *, ok: bool) -> None:
        self._allocate.labels(resource, "ok" if ok else "refused").observe(seconds)

    def claim_prepared(self, *, ok: bool) -> None:
        self._claims["prepare"].labels("ok" if ok else "failed").inc()

    def claim_unprepared(self, *, ok: bool) -> None:
        self._claims["unprepare"].labels("ok" if ok else "failed").inc()

    def prepares_retried(self, pods: int) -> None:
        self._prepares_retried.inc(pods)

    def probe_ran(self, resource: str, seconds: float, *, ok: bool) -> None:
        self._probe_runs.labels(resource, "passed" if ok else "failed").inc()
        self._probe_duration.labels(resource).observe(seconds)


def _cluster_pool_metrics(cluster: ClusterPoolsReport) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "token_resource_cluster_pools_leader",
        "1 while this publisher holds its driver's Lease and writes the cluster pools, else 0",
        value=int(cluster.leading),
    )
    offered = GaugeMetricFamily(
        "token_resource_cluster_pool_tokens_offered",
        "Tokens of a cluster pool left untainted: allocated ones and the free seats",
        labels=["resource"],
    )
    allocated = GaugeMetricFamily(
        "token_resource_cluster_pool_tokens_allocated",
        "Tokens of a cluster pool allocated to claims, cluster-wide",
        labels=["resource"],
    )
    for pool in cluster.pools:
        offered.add_metric([pool.resource], pool.healthy)
        if pool.allocated is not None:
            allocated.add_metric([pool.resource], pool.allocated)
    yield from (offered, allocated)


class _ReportCollector(Collector):
    """Gauges from a fresh report: tokens configured, registered, allocated, free."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, report: Callable[[], Awaitable[StatusReport]]
    ) -> None:
        self._loop = loop
        self._report = report

    def collect(self) -> Iterator[Metric]:
        report = self._fetch()
        if report is None:
            return
        configured = GaugeMetricFamily(
            "token_resource_tokens_configured", "Tokens configured", labels=["resource"]
        )
        registered = GaugeMetricFamily(
            "token_resource_registered",
            "1 when the resource's device plugin is registered with the kubelet, else 0",
            labels=["resource"],
        )
        allocated = GaugeMetricFamily(
            "token_resource_tokens_allocated",
            "Tokens held by containers, as the kubelet's PodResources API lists them "
            "(may exceed the count after it was lowered)",
            labels=["resource"],
        )
        free = GaugeMetricFamily(
            "token_resource_tokens_free",
            "Healthy tokens configured and not held: what new pods may still get",
            labels=["resource"],
        )
        healthy = GaugeMetricFamily(
            "token_resource_tokens_healthy",
            "Tokens configured that the resource's probe finds usable (all, without a probe)",
            labels=["resource"],
        )
        for resource in report.resources:
            configured.add_metric([resource.name], resource.count)
            healthy.add_metric([resource.name], resource.healthy)
            if resource.registered is not None:
                registered.add_metric([resource.name], int(resource.registered))
            if resource.in_use is not None and resource.free is not None:
                allocated.add_metric([resource.name], resource.in_use)
                free.add_metric([resource.name], resource.free)
        yield from (configured, registered, allocated, free, healthy)
        if report.pod_resources_socket:  # a publisher of cluster pools asks no kubelet
            yield GaugeMetricFamily(
                "token_resource_pod_resources_up",
                "1 when the kubelet's PodResources API answered for this scrape, else 0",
                value=int(report.pod_resources_error is None),
            )
        if report.cluster_pools is not None:
            yield from _cluster_pool_metrics(report.cluster_pools)

    def _fetch(self) -> StatusReport | None:
        """The agent's report, made on its loop; None if the loop is stopping or stuck."""
        future = asyncio.run_coroutine_threadsafe(self._await(), self._loop)
        try:
            return future.result(REPORT_WAIT_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            log.warning(
                "metrics: no report within %g s; the gauges are left out", REPORT_WAIT_SECONDS
            )
        except concurrent.futures.CancelledError:
            pass  # the agent is stopping
        return None

    async def _await(self) -> StatusReport:
        return await self._report()
