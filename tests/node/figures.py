"""What the real node's tests measured (rejections, seconds until Ready, seconds without a
registration), kept for the run's summary: the figures docs/dra.md and docs/kubernetes.md cite."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Figures:
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, release: str, what: str, value: str) -> None:
        self.rows.append((f"v{release}", what, value))

    def __bool__(self) -> bool:
        return bool(self.rows)

    def table(self) -> str:
        width = max(len(what) for _, what, _ in self.rows)
        return "\n".join(
            f"{release:8} {what:{width}}  {value}" for release, what, value in sorted(self.rows)
        )
