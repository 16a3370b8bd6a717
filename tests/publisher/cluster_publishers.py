"""Publishers of cluster pools (``token-resource run --role publisher``) as real processes
against the API-server stand-in, and what the stand-in's record says of them: who holds the
Lease, which generation the pool is at, who wrote what. Shared by the publisher's tests and by
the benchmark (bench/cluster_pools.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin, ApiServerView
from tests.standin.apiserver.authz import Rule
from tests.standin.apiserver.leases import LEASE_RULES
from token_resource.apiserver.keeping.cluster_slices import lease_name
from token_resource.apiserver.objects.slices import cluster_pool_name

NAMESPACE = "token-resource"
DRIVER = "tokens.example.com"
LICENSE = "example.com/license"
POOL = cluster_pool_name(LICENSE)
LEASE = f"{NAMESPACE}/{lease_name(DRIVER)}"
PUBLISHER_RULES = (
    *LEASE_RULES,
    Rule(
        ("resource.k8s.io",),
        ("resourceslices",),
        ("get", "list", "watch", "create", "update", "delete"),
    ),
    Rule(("resource.k8s.io",), ("resourceclaims",), ("get", "list", "watch")),
)
# Short enough for tests; client-go's rule (lease > renew > 1.2 x retry) holds.
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 2.0, 1.2, 0.2
FAST = (
    f"lease_duration_seconds = {LEASE_SECONDS}\n"
    f"renew_deadline_seconds = {RENEW_SECONDS}\n"
    f"retry_period_seconds = {RETRY_SECONDS}\n"
)
DEFAULT_TIMING = ""  # client-go's defaults: lease 15 s, renew 10 s, retry 2 s
LEASES_PATH = "/leases"


def account(name: str) -> str:
    """The user publisher ``name`` (p0, p1, ...) authenticates as."""
    return f"system:serviceaccount:{NAMESPACE}:{name}"


def publisher_config(
    kubeconfig: Path,
    count: int,
    extra: str = "",
    timing: str = FAST,
    resources: Sequence[str] = (LICENSE,),
    lease_namespace: str | None = NAMESPACE,
) -> str:
    """A publisher's file: each of ``resources`` a cluster pool of ``count`` tokens, ``extra``
    added to each one's table; no lease_namespace if None."""
    namespace = "" if lease_namespace is None else f'lease_namespace = "{lease_namespace}"\n'
    return (
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\n{namespace}{timing}'
        f'[dra]\ndriver = "{DRIVER}"\n'
        + "".join(
            f'[resources."{name}"]\ncount = {count}\nadvertise = "dra"\nscope = "cluster"\n{extra}'
            for name in resources
        )
    )


@contextmanager
def publishers(
    apiserver: ApiServerStandin,
    tmp_path: Path,
    count: int,
    *,
    tokens: int = 5,
    timing: str = FAST,
    resources: Sequence[str] = (LICENSE,),
    context_namespace: str = "default",
    lease_namespace: str | None = NAMESPACE,
) -> Iterator[dict[str, AgentProcess]]:
    """``count`` publishers p0, p1, ..., each with a service account of its own (so that the
    stand-in's log says who wrote what), started one after the other; killed at the end.
    ``context_namespace`` is their kubeconfigs' context's."""
    started: dict[str, AgentProcess] = {}
    try:
        for index in range(count):
            name = f"p{index}"
            token = f"token-{name}"
            apiserver.add_token(token, user=account(name), rules=PUBLISHER_RULES)
            kubeconfig = apiserver.write_kubeconfig(
                tmp_path / f"{name}.conf", token=token, namespace=context_namespace
            )
            process = AgentProcess(tmp_path / name, tmp_path / "unused", role="publisher")
            process.write_config(
                publisher_config(
                    kubeconfig,
                    tokens,
                    timing=timing,
                    resources=resources,
                    lease_namespace=lease_namespace,
                )
            )
            started[name] = process
            process.start()
        yield started
    finally:
        for process in started.values():
            process.kill()


def cluster_slices(view: ApiServerView) -> list[dict[str, Any]]:
    return [
        obj
        for obj in view.slices.values()
        if obj["spec"]["driver"] == DRIVER and obj["spec"].get("allNodes")
    ]


def generation(view: ApiServerView) -> int | None:
    generations = {obj["spec"]["pool"]["generation"] for obj in cluster_slices(view)}
    return max(generations) if generations else None


def newest_devices(view: ApiServerView) -> list[dict[str, Any]]:
    """The devices of the pool's newest generation, in slice and device order."""
    newest = generation(view)
    return [
        device
        for obj in cluster_slices(view)
        if obj["spec"]["pool"]["generation"] == newest
        for device in obj["spec"]["devices"]
    ]


def devices(view: ApiServerView) -> list[str]:
    return [device["name"] for device in newest_devices(view)]


def holder(view: ApiServerView) -> str | None:
    lease = view.leases.get(LEASE)
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


def authors(view: ApiServerView, generation: int | None = None) -> set[str]:
    """The publishers (p0, p1, ...) that wrote the pool (that generation of it)."""
    return {
        name_of(write.author)
        for write in view.slice_writes(DRIVER, POOL)
        if generation is None or write.generation == generation
    }


def writer_of(view: ApiServerView) -> str:
    """The one publisher that wrote the pool (p0, p1, ...)."""
    (writer,) = authors(view)
    return writer


def holder_and_generation(apiserver: ApiServerStandin) -> tuple[str, int]:
    """Once the pool is published: the one publisher that wrote it, and its generation."""
    view = apiserver.wait_for(lambda v: generation(v) is not None)
    published = generation(view)
    assert published is not None
    return writer_of(view), published


def status_of(process: AgentProcess) -> dict[str, Any]:
    answer = process.cli("status", "--json")
    assert answer.returncode == 0, answer.stderr
    report: dict[str, Any] = json.loads(answer.stdout)
    return report


@dataclass(frozen=True)
class LeaseWrite:
    at: float
    author: str  # p0, p1, ...
    holder: str  # the holderIdentity it wrote


def lease_writes(view: ApiServerView) -> list[LeaseWrite]:
    """Every successful write of the Lease, oldest first."""
    return [
        LeaseWrite(
            request.at,
            str(request.identity).rsplit(":", 1)[-1],
            str(((request.response or {}).get("spec") or {}).get("holderIdentity") or ""),
        )
        for request in view.requests
        if request.method in ("POST", "PUT")
        and LEASES_PATH in request.path
        and 200 <= request.status < 300
    ]


def name_of(author: str) -> str:
    return author.rsplit(":", 1)[-1]
