"""A small HTTPS client for the real API server, for the tests' own requests: every answer is
``(status, body)``, so a test asserts refusals (403, 422) as plainly as successes."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tests.standin.apiserver.certificates import CertificateAuthority, KeyPair, client_context

TIMEOUT = 30.0
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_T = TypeVar("_T")


class ApiStatusError(AssertionError):
    """An answer a test did not expect."""


class KubeClient:
    """Requests with fixed credentials (a client certificate or a bearer token)."""

    def __init__(
        self,
        host: str,
        port: int,
        ca: CertificateAuthority,
        certificate: KeyPair | None = None,
        token: str | None = None,
    ) -> None:
        self.host, self.port, self.token = host, port, token
        self.context: ssl.SSLContext = client_context(ca, certificate)

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        # A connection a request: the tests' requests are few, and a fresh one never finds a
        # keep-alive connection the server closed meanwhile.
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=TIMEOUT
        )
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body)
        try:
            connection.request(method, path, data, headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """The body of a 2xx answer; any other status fails the test with the server's message."""
        status, answer = self.request(method, path, body, **kwargs)
        if not 200 <= status < 300:
            raise ApiStatusError(f"{method} {path}: {status} {answer}")
        return answer

    def get(self, path: str) -> Any:
        return self.ok("GET", path)

    def create(self, path: str, body: Any) -> Any:
        return self.ok("POST", path, body)

    def delete(self, path: str) -> tuple[int, Any]:
        return self.request("DELETE", path)


def wait_until(
    what: str,
    probe: Callable[[], _T | None],
    timeout: float = 60.0,  # under pytest-timeout's 120 s a test, which would say less
    interval: float = 0.2,
    show: Callable[[], Any] | None = None,
) -> _T:
    """The first truthy result of ``probe``: the real components act asynchronously and offer
    these tests no event to wait on but the objects they write, so this polls them. A timeout
    says what ``show`` returns then (what the test saw instead)."""
    deadline = time.monotonic() + timeout
    last: _T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    seen = show() if show is not None else last
    raise AssertionError(f"{what}: not within {timeout} s; saw: {seen!r}")


def resource_version(event: Mapping[str, Any]) -> int:
    """The resourceVersion an audited list or watch asked from; 0 for none."""
    found = re.search(r"[?&]resourceVersion=([0-9]+)", event["requestURI"])
    return int(found[1]) if found else 0
