"""What the real node's tests measured (rejections, seconds until Ready, seconds without a
registration), kept for the run's summary: the figures docs/dra.md and docs/kubernetes.md cite."""

from __future__ import annotations

import datetime
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


def log_time(line: str) -> datetime.datetime:
    """The time an agent's log line starts with (``2026-12-04 21:22:58,357``)."""
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
