"""What a ResourceClaim's change costs the cluster pools' publisher, against how many claims
the cluster holds, with nothing else on the machine's cores.

The fleet benchmark (bench/scale.py) measures the same beside the simulated nodes, whose
Lease renewals (500 writes a second at 5,000 Nodes) load this 2-core machine more the larger
the cluster: its per-change figure then follows the load. Here the real control plane holds
only the publisher (a cluster pool, its service account) and 100, 1,000, then 5,000 standing
claims, each allocated a token of a node's pool of the publisher's driver (as the fleet's are:
the publisher keeps them, and leaves them out of its own pool's count); at each, 1,000 claims
are created, allocated a seat of the publisher's pool and deleted, three times (bench/claims.py,
as the scheduler writes an allocation), and the least CPU time a round cost the publisher (its
rusage) is the figure.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from bench.audit import AUDIT_POLICY
from bench.claims import allocated_claim
from bench.scale import (
    CHURN,
    CHURN_CHANGES,
    CHURN_ROUNDS,
    DRIVER,
    TOKEN,
    Fleet,
    side_by_side,
)
from bench.scenarios import Scale, Section
from tests.kube.client import KubeClient
from tests.kube.controlplane import ControlPlane
from token_resource.config.names import token_id


def claim_churn_section(scale: Scale) -> Section:
    counts = (100, 1000) if scale.quick else (100, 1000, 5000)
    section = Section("A claim's change, for the publisher, against the claims standing")
    with tempfile.TemporaryDirectory(prefix="trb-churn-") as scratch, ExitStack() as stack:
        directory = Path(scratch)
        (directory / "cp").mkdir()
        cp = stack.enter_context(ControlPlane(directory / "cp", audit_policy=AUDIT_POLICY))
        fleet = stack.enter_context(Fleet.started(cp, directory, 0))
        standing = 0
        for count in counts:
            add_standing(cp, range(standing, count))
            standing = count
            rounds = [fleet.claim_churn(CHURN) for _ in range(CHURN_ROUNDS)]
            each = [r.publisher_cpu * 1000 / CHURN_CHANGES for r in rounds]
            asked = Counter[str]()
            for each_round in rounds:
                asked.update(each_round.publisher)
            shown = ", ".join(f"{what} {n}" for what, n in asked.most_common()) or "none"
            section.add(
                f"{count:,} claims standing: {CHURN:,} created, allocated, deleted, "
                f"{CHURN_ROUNDS} times",
                f"{min(each):.3f} ms of CPU per change at least "
                f"(rounds: {', '.join(f'{ms:.3f}' for ms in each)}); "
                f"the publisher's requests meanwhile: {shown}",
            )
    section.notes.append(
        f"CPU: the publisher's own rusage over a round, divided by its {CHURN_CHANGES:,} changes."
    )
    return section


def add_standing(cp: ControlPlane, indices: range) -> None:
    def add(client: KubeClient, name: str) -> None:
        allocated_claim(client, name, TOKEN, DRIVER, f"{name}-token", token_id(0))

    side_by_side(cp, [f"standing-{index}" for index in indices], add)
