"""docs/performance.md quotes the benchmarks' reports (bench/results/, written by `make bench
BENCH_ARGS='--only NAME'`) as they are: a figure copied by hand, or left behind by a new run,
fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PERFORMANCE = REPO / "docs" / "performance.md"
CLAIM_CHURN = REPO / "bench" / "results" / "claim-churn.md"
MASS_RESTART = REPO / "bench" / "results" / "mass-restart.md"
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


# bench/mass_restart.py's rows (bench/counts.py's Restart): what the agents asked in their
# first minute, then when their drivers registered again.
_RESTART_ROW = re.compile(
    r"\| (?P<nodes>[\d,]+) nodes: every agent restarted at once, its first (?P<window>\d+) s "
    r"\| requests per agent \(mean of (?P<agents>\d+)\): (?P<requests>[^;]+); .*?"
    r"(?P<kib>\d+\.\d) KiB received at most; CPU (?P<cpu>\d+\.\d+) s at most"
)
_REGISTERED_ROW = re.compile(
    r"drivers registered with their kubelet \| (?P<done>\d+) of (?P<of>\d+)"
    r"(?:, (?P<first>[\d.]+) to (?P<last>[\d.]+) s after the start)?"
)


def restart_figures(report: str) -> dict[str, str]:
    found = _RESTART_ROW.search(report)
    registered = _REGISTERED_ROW.search(report)
    assert found is not None, report
    assert registered is not None, report
    return {**found.groupdict(), **{k: v or "" for k, v in registered.groupdict().items()}}


def test_the_mass_reboot_paragraph_quotes_the_report() -> None:
    report = MASS_RESTART.read_text()
    figures = restart_figures(report)
    text = " ".join(PERFORMANCE.read_text().split())
    start = text.index("**A mass reboot.**")
    paragraph = text[start : text.index("**", start + len("**A mass reboot.**"))]
    date = re.search(r"on (\d{4}-\d{2}-\d{2})", report)
    assert date is not None
    assert figures["done"] == figures["of"] == figures["agents"], figures  # all registered
    for quoted in (
        f"{figures['nodes']} Nodes",
        f"the run of {date[1]}",
        f"{figures['agents']} real agents",
        f"first {figures['window']} s",
        f"({figures['requests']})",
        f"{figures['kib']} KiB",
        f"{figures['cpu']} s of CPU",
        f"{figures['first']} to {figures['last']} s",
    ):
        assert quoted in paragraph, f"the mass reboot paragraph does not quote {quoted!r}"


def test_restart_rows_are_read_as_bench_mass_restart_writes_them() -> None:
    rows = (
        "| 100 nodes: every agent restarted at once, its first 60 s | requests per agent "
        "(mean of 3): list nodes 1, watch nodes 1; 2 to 2 in all; 4.6 KiB received at most; "
        "CPU 0.38 s at most |  |  |\n"
        "| 100 nodes: the restarted agents' drivers registered with their kubelet | 3 of 3, "
        "0.5 to 0.7 s after the start |  |  |\n"
    )
    assert restart_figures(rows) == {
        "nodes": "100",
        "window": "60",
        "agents": "3",
        "requests": "list nodes 1, watch nodes 1",
        "kib": "4.6",
        "cpu": "0.38",
        "done": "3",
        "of": "3",
        "first": "0.5",
        "last": "0.7",
    }
