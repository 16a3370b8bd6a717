"""The kubelet stand-in's DRA manager: its wipes of the node's ResourceSlices.

As the real one (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go ``wipeResourceSlices``): at
start, every slice of the node (DeleteCollection with ``fieldSelector=spec.nodeName=<node>``,
after a GET of the Node), in the background; and ``deregistration_grace`` (30 s,
``wipingDelay``) after a driver has no connected plugin left, that driver's slices
(``spec.driver=<d>,spec.nodeName=<node>``) unless a plugin of it is connected again by then
(``sync``). Failed wipes are retried after 1 s, doubling, up to 5 min. The kubelet reaches
the API server with the node's own credentials (:class:`ApiAccess`).
"""

from __future__ import annotations

import http.client
import json
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.standin.kubelet_dra_state import DraState

WIPE_FIRST_RETRY = 1.0
WIPE_LAST_RETRY = 300.0
_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@dataclass(frozen=True)
class ApiAccess:
    """How the kubelet reaches the API server: its URL and the node's own credentials (PEM),
    as in its kubeconfig."""

    url: str
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def connection(self, timeout: float | None = 10.0) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        with tempfile.TemporaryDirectory(prefix="kubelet-standin-") as directory:
            pair = Path(directory, "client.pem")
            pair.write_bytes(self.cert_pem + self.key_pem)
            context.load_cert_chain(pair)
        host, _, port = self.url.removeprefix("https://").partition(":")
        return http.client.HTTPSConnection(host, int(port), context=context, timeout=timeout)

    def request(self, verb: str, path: str, timeout: float = 10.0) -> tuple[int, Any]:
        connection = self.connection(timeout)
        try:
            connection.request(verb, path)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            connection.close()


class SliceWipes(DraState):
    """The DRA manager's slice wipes, at start and after a driver's grace."""

    node: str
    apiserver: ApiAccess | None  # None: no wipes
    grace: float  # seconds from a driver's last connected plugin to its wipe
    _wipe_due: dict[str, float]  # driver -> when its slices go (guarded by _cond)

    def _sync(self, driver: str) -> None:
        """Caller holds the lock: a usable driver cancels its wipe, else one is due."""
        if self.apiserver is None:
            return
        if any(p.connected for p in self._plugins.get(driver, [])):
            self._wipe_due.pop(driver, None)
        elif driver not in self._wipe_due:
            self._wipe_due[driver] = time.monotonic() + self.grace
        self._cond.notify_all()

    def _wiper(self, generation: int) -> None:
        while True:
            with self._cond:
                while self._generation == generation:
                    now = time.monotonic()
                    due = [d for d, when in self._wipe_due.items() if when <= now]
                    if due:
                        break
                    waits = [when - now for when in self._wipe_due.values()]
                    self._cond.wait(min(waits) if waits else None)
                if self._generation != generation:
                    return
                for driver in due:
                    del self._wipe_due[driver]
            for driver in due:
                self._wipe(driver, generation)

    def _wipe(self, driver: str | None, generation: int) -> None:
        """DeleteCollection of the node's (driver's) slices, retried until it succeeds."""
        if self.apiserver is None:
            return
        selector = f"spec.nodeName={self.node}"
        if driver is not None:
            selector = f"spec.driver={driver},{selector}"
        delay = WIPE_FIRST_RETRY
        while True:
            error = self._try_wipe(selector)
            with self._cond:
                if self._generation != generation:
                    return
                if error is None:
                    if driver is None:
                        self._start_wipes += 1
                    else:
                        self._update(driver, wipes=self._drivers[driver].wipes + 1)
                    self._changed(f"ResourceSlices deleted ({selector})")
                    return
                self._changed(f"deleting ResourceSlices ({selector}) failed: {error}")
                self._cond.wait_for(lambda: self._generation != generation, delay)
            delay = min(delay * 2, WIPE_LAST_RETRY)

    def _try_wipe(self, selector: str) -> str | None:
        assert self.apiserver is not None
        try:
            status, body = self.apiserver.request("GET", f"/api/v1/nodes/{self.node}")
            if status == 200:
                path = f"{_SLICES}?fieldSelector={quote(selector)}"
                status, body = self.apiserver.request("DELETE", path)
        except (OSError, ValueError) as error:
            return str(error)
        if status in (200, 404):
            return None
        return f"{status}: {body.get('message') if isinstance(body, dict) else body}"
