"""The cluster pools' allocated tokens kept from a watch of ResourceClaims (apiserver/
allocations.py), against the API-server stand-in: right after 1,000 random claim creations,
deallocations and deletions while the watch is cut at random (the history compacted under it:
410, the API server restarted: resumed), and listed again only after a 410."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seeded import seeds
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from token_resource.apiserver.keeping.allocations import CLAIMS_PATH, Allocations
from token_resource.config.model import KubernetesSettings

DRIVER = "tokens.example.com"
OTHER_DRIVER = "other.example.com"
POOLS = ("pool-a", "pool-b")
NODE = "node-a"
CHANGES = 1000
TOKENS = 8
DEADLINE = 60.0


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=(NODE,), tokens={"publisher": True}) as standin:
        yield standin


@pytest.fixture
def settings(apiserver: ApiServerStandin, tmp_path: Path) -> KubernetesSettings:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "publisher.conf", token="publisher")
    return KubernetesSettings(kubeconfig=kubeconfig, node_name=NODE, resync_seconds=1)


def lists(view: ApiServerView) -> int:
    return sum(
        1
        for r in view.requests
        if r.method == "GET" and r.path == CLAIMS_PATH and "watch=true" not in r.query
    )


class RandomClaims:
    """Random changes of the stand-in's claims, and which of the driver's tokens they hold."""

    def __init__(self, apiserver: ApiServerStandin, rng: random.Random) -> None:
        self.apiserver, self.rng = apiserver, rng
        self.truth: dict[str, set[tuple[str, int]]] = {}  # claim -> the driver's tokens
        self.allocated: set[str] = set()

    def change(self, number: int) -> None:
        rng, name = self.rng, f"claim-{self.rng.randrange(60)}"
        if name not in self.truth:
            driver = DRIVER if rng.random() < 0.8 else OTHER_DRIVER
            held = {(rng.choice(POOLS), rng.randrange(TOKENS)) for _ in range(rng.randint(1, 3))}
            results = [("r", pool, f"token-{index}") for pool, index in sorted(held)]
            self.apiserver.allocate_claim(
                "default", name, pod=f"pod-{number}", node=NODE, driver=driver, results=results
            )
            self.truth[name] = held if driver == DRIVER else set()
            self.allocated.add(name)
        elif name in self.allocated and rng.random() < 0.5:
            self.apiserver.deallocate("default", name)
            self.allocated.discard(name)
            self.truth[name] = set()
        else:
            self.apiserver.delete_claim("default", name)
            self.allocated.discard(name)
            del self.truth[name]

    def expected(self) -> dict[str, frozenset[int]]:
        indices: dict[str, set[int]] = {pool: set() for pool in POOLS}
        for held in self.truth.values():
            for pool, index in held:
                indices[pool].add(index)
        return {pool: frozenset(found) for pool, found in indices.items()}


@seeds()
@pytest.mark.timeout(600)  # a thousand stand-in writes and a watch following each
def test_the_counts_are_right_after_a_thousand_random_claim_changes_with_cut_watches(
    apiserver: ApiServerStandin, settings: KubernetesSettings, rng: random.Random
) -> None:
    claims = RandomClaims(apiserver, rng)
    compactions = 0

    async def settled(allocations: Allocations) -> None:
        deadline = time.monotonic() + DEADLINE
        while allocations.allocated(POOLS) != claims.expected():
            assert time.monotonic() < deadline, (allocations.allocated(POOLS), claims.expected())
            await asyncio.sleep(0.02)

    async def scenario() -> None:
        nonlocal compactions
        allocations = Allocations(lambda: settings, DRIVER)
        allocations.start()
        try:
            for number in range(CHANGES):
                claims.change(number)
                cut = rng.random()
                if cut < 0.01:
                    apiserver.compact()  # the watch ends; its version is gone: 410, a list
                    compactions += 1
                elif cut < 0.015:
                    apiserver.stop()  # the watch breaks off; resumed from where it was
                    apiserver.start()
                if rng.random() < 0.05:
                    await settled(allocations)
                else:
                    await asyncio.sleep(0)
            await settled(allocations)
        finally:
            await allocations.close()

    asyncio.run(scenario())
    # One list at start and at most one after each compaction; a restart lists nothing.
    assert 1 <= lists(apiserver.snapshot()) <= 1 + compactions
