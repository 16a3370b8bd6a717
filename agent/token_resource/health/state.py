"""Which of a resource's tokens are usable: what the health wing hands the advertising wings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class TokenHealth:
    """The unhealthy tokens of a resource, by index, each with its reason; every other token is
    healthy. A resource without a probe is ALL_HEALTHY."""

    unhealthy: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "unhealthy", MappingProxyType(dict(sorted(self.unhealthy.items())))
        )

    def __hash__(self) -> int:
        return hash(tuple(self.unhealthy.items()))

    def healthy(self, index: int) -> bool:
        return index not in self.unhealthy

    def healthy_count(self, count: int) -> int:
        """How many of tokens 0 .. count-1 are healthy."""
        return count - sum(1 for index in self.unhealthy if index < count)

    def within(self, count: int) -> TokenHealth:
        """The same, for a resource of ``count`` tokens."""
        return TokenHealth({i: why for i, why in self.unhealthy.items() if i < count})


ALL_HEALTHY = TokenHealth()
