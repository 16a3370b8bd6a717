"""docs/performance.md quotes the benchmarks' reports (bench/results/, written by `make bench
BENCH_ARGS='--only NAME'`) as they are: a figure copied by hand, or left behind by a new run,
fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PERFORMANCE = REPO / "docs" / "performance.md"
CLAIM_CHURN = REPO / "bench" / "results" / "claim-churn.md"
# A row of bench/claim_churn.py's section: the standing claims, then the least CPU a change.
_CHURN_ROW = re.compile(
    r"\| (?P<standing>[\d,]+) claims standing: .*? \| (?P<ms>\d+\.\d+) ms of CPU per change"
)


def churn_figures(report: str) -> dict[str, str]:
    return {row["standing"]: row["ms"] for row in _CHURN_ROW.finditer(report)}


def test_the_claim_churn_figures_are_the_reports() -> None:
    figures = churn_figures(CLAIM_CHURN.read_text())
    assert list(figures) == ["100", "1,000", "5,000"], figures
    quoted = (
        f"{figures['100']} / {figures['1,000']} / {figures['5,000']} ms a change at 100, 1,000 "
        "and 5,000 standing claims"
    )
    text = " ".join(PERFORMANCE.read_text().split())  # as rendered: lines wrapped anywhere
    assert quoted in text, f"docs/performance.md does not quote {CLAIM_CHURN.name}: {quoted!r}"
    date = re.search(r"on (\d{4}-\d{2}-\d{2})", CLAIM_CHURN.read_text())
    assert date is not None
    assert f"the run of {date[1]}" in text


def test_a_row_is_read_as_bench_claim_churn_writes_it() -> None:
    row = (
        "| 1,000 claims standing: 1,000 created, allocated, deleted, 3 times | 0.200 ms of CPU "
        "per change at least (rounds: 0.203, 0.203, 0.200); the publisher's requests |  |  |\n"
    )
    assert churn_figures(row) == {"1,000": "0.200"}
    assert churn_figures(row.replace("0.200 ms", "fast")) == {}
