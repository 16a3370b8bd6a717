"""Which of a resource's connections the device manager keeps, by release: its handler's
clients and its manager's endpoints, for the kubelet stand-in (kubelet.py applies them).

Real kubelets keep two books (pkg/kubelet/cm/devicemanager):

- the handler's clients (plugin/v1beta1/handler.go ``registerClient`` / ``deregisterClient`` /
  ``getClient``): up to 1.36 one per resource NAME, so a Register of the resource forgets the
  client there without closing it (its ListAndWatch stream keeps delivering lists); 1.37
  (kubernetes PR #135437) keeps a list per name, and forgets every client of a socket path;
- the manager's endpoints (manager.go ``PluginConnected`` / ``PluginDisconnected``): up to 1.36
  ``endpoints[resource]``, replaced by each connect; a disconnect marks the resource unhealthy.
  1.37 adds ``endpointStore[resource][socket path]``: a connect of a path already there fails
  with ``device plugin already connected: <path>``, otherwise the new endpoint becomes the
  current one (calls go there) and the others stay; a disconnect of the last one marks the
  resource unhealthy, of another just drops it and promotes a remaining one ("an arbitrary
  remaining endpoint"; here the newest).

When a client's stream ends (handler.go ``runClient``) the kubelet looks up the client of the
same name (up to 1.36) or name and path (1.37) and disconnects THAT one: closes its
connection, deregisters it, tells the manager. Hence the traps: up to 1.36 the end of a
replaced client's stream disconnects its successor (kubernetes#121994); in 1.37 a refused
Register of a path still connected makes the handler forget the live client, whose end then
disconnects nothing, so its endpoint stays in the store for good (until a restart) and every
later Register of that path is refused.

``"1.32"`` is the stand-in's older, simpler model, kept as the default for the tests written
against it: a Register replaces the resource's connection and cancels the old stream at once
(the real 1.32 handler.go is the 1.36 one above, by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

# The device managers modelled; see the module's docstring.
DEVICE_MANAGERS = ("1.32", "1.36", "1.37")


class _Link(Protocol):
    resource: str
    path: Path


LinkT = TypeVar("LinkT", bound=_Link)


class EndpointBook(Generic[LinkT]):
    """The handler's clients and the manager's endpoints of one device manager release.

    Pure bookkeeping; the caller holds the kubelet's lock and acts on what it returns.
    """

    def __init__(self, release: str) -> None:
        if release not in DEVICE_MANAGERS:
            raise ValueError(f"device_manager: one of {DEVICE_MANAGERS}")
        self.release = release
        self._clients: dict[str, list[LinkT]] = {}  # handler.go's s.clients
        self._current: dict[str, LinkT] = {}  # manager.go's m.endpoints, while connected
        self._store: dict[str, dict[Path, LinkT]] = {}  # 1.37's m.endpointStore

    def register_client(self, link: LinkT) -> list[LinkT]:
        """registerClient, at the start of Register. Returns the clients it forgets (up to
        1.36 the one of the same name; the "1.32" model closes it, the real ones do not)."""
        forgotten: list[LinkT] = []
        if self.release == "1.37":
            self._clients.setdefault(link.resource, []).append(link)
        else:
            forgotten = self._clients.get(link.resource, [])
            self._clients[link.resource] = [link]
        return forgotten

    def deregister_client(self, resource: str, path: Path) -> None:
        """deregisterClient: up to 1.36 the client of the name, in 1.37 every one of the path."""
        kept = [
            link
            for link in self._clients.get(resource, [])
            if self.release == "1.37" and link.path != path
        ]
        if kept:
            self._clients[resource] = kept
        else:
            self._clients.pop(resource, None)

    def client_for(self, ended: LinkT) -> LinkT | None:
        """getClient in runClient after ``ended``'s stream ended: the client to disconnect."""
        clients = self._clients.get(ended.resource, [])
        if self.release == "1.32":  # the stand-in's model: only the live link itself
            return ended if ended in clients else None
        if self.release == "1.36":
            return clients[0] if clients else None
        return next((link for link in clients if link.path == ended.path), None)

    def connect(self, link: LinkT) -> str | None:
        """PluginConnected: the error that fails the Register, or None."""
        if self.release == "1.37":
            store = self._store.setdefault(link.resource, {})
            if link.path in store:
                return f"device plugin already connected: {link.path}"
            store[link.path] = link
        self._current[link.resource] = link
        return None

    def disconnect(self, link: LinkT) -> bool:
        """PluginDisconnected; True if the resource is now unhealthy (no endpoint left)."""
        if self.release != "1.37":
            return self._current.pop(link.resource, None) is not None
        store = self._store.get(link.resource, {})
        if store.pop(link.path, None) is None:
            return False
        if not store:
            del self._store[link.resource]
            self._current.pop(link.resource, None)
            return True
        self._current[link.resource] = list(store.values())[-1]
        return False

    def current(self, resource: str) -> LinkT | None:
        """The endpoint Allocate, GetPreferredAllocation and the options come from."""
        return self._current.get(resource)

    def endpoints(self, resource: str) -> Sequence[LinkT]:
        """The resource's connected endpoints, oldest first (up to 1.36: the current one)."""
        if self.release == "1.37":
            return tuple(self._store.get(resource, {}).values())
        current = self._current.get(resource)
        return () if current is None else (current,)

    def clear(self) -> list[LinkT]:
        """The kubelet stops: every endpoint it still holds, which it disconnects."""
        held = list(
            dict.fromkeys(
                [*self._current.values()]
                + [link for store in self._store.values() for link in store.values()]
            )
        )
        self._clients.clear()
        self._current.clear()
        self._store.clear()
        return held
