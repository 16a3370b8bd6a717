"""Seeds of randomized tests: a fresh seed each run (printed: ``TOKEN_RESOURCE_SEED=N``
replays it), ``TOKEN_RESOURCE_FUZZ_SEEDS`` fresh ones under ``make fuzz``, and the seeds that
once found a fault, kept as regression cases. A test takes the ``rng`` fixture (a plugin of
tests/conftest.py) and is marked ``@seeds(...)``."""

from __future__ import annotations

import os
import random

import pytest

# `make fuzz` runs each randomized test with this many fresh seeds instead of one.
FRESH_SEEDS = int(os.environ.get("TOKEN_RESOURCE_FUZZ_SEEDS", "1"))


def seeds(*regressions: int) -> pytest.MarkDecorator:
    """Run a randomized test with a fresh seed (``FRESH_SEEDS`` of them under ``make fuzz``)
    and with every seed that once found a fault, kept here so that the fault stays fixed."""
    fresh = [None] * FRESH_SEEDS
    return pytest.mark.parametrize(
        "rng",
        [*fresh, *regressions],
        ids=[*(f"fresh{i}" for i in range(len(fresh))), *(f"seed{s}" for s in regressions)],
        indirect=True,
    )


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    seed = getattr(request, "param", None)
    if seed is None:
        seed = int(os.environ.get("TOKEN_RESOURCE_SEED", random.SystemRandom().randrange(2**32)))
    print(f"{request.node.name}: seed {seed} (TOKEN_RESOURCE_SEED={seed} replays it)")
    return random.Random(seed)
