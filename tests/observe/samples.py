"""Reading the agent's Prometheus metrics as a test does: a scrape of its HTTP listener or a
textfile's text, parsed by prometheus_client's own parser into samples by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
SCRAPE_TIMEOUT = 30.0


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as response:
        assert response.status == 200
        return parse(response.read().decode())


def parse(text: str) -> Samples:
    # prometheus_client's own parser (untyped before 0.17).
    families = text_string_to_metric_families(text)  # type: ignore[no-untyped-call, unused-ignore]
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
