"""The node's addresses, and the way its pods reach the API server, all on this machine.

The kubelet refuses a loopback node IP and the machine has no dummy interfaces: the node's
address is on a bridge with no ports (``NODE_BRIDGE``). No kube-proxy runs: a pod's in-cluster
configuration dials the ``kubernetes`` Service (``SERVICE_IP``:443), which is an address of
that same bridge here, where a relay (``ServiceRelay``) passes each connection on to the API
server on 127.0.0.1; the pods' CNI route sends the Service range to their bridge's gateway,
the host. Nothing is forwarded off the machine: no ip_forward, no NAT, nothing on eth0.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import threading
from collections.abc import Iterator

NODE_BRIDGE = "trnode0"
NODE_IP = "10.253.0.1"
POD_BRIDGE = "trpod0"
POD_SUBNET = "10.253.64.0/24"
SERVICE_RANGE = "10.96.0.0/16"  # the control plane's --service-cluster-ip-range
SERVICE_IP = "10.96.0.1"  # the "kubernetes" Service: the range's first address
SERVICE_PORT = 443
RELAY_BUFFER = 65536


class _Relay(socketserver.BaseRequestHandler):
    server: _RelayServer

    def handle(self) -> None:
        client: socket.socket = self.request
        try:
            upstream = socket.create_connection(self.server.upstream, timeout=10)
        except OSError:
            return
        upstream.settimeout(None)
        with upstream, selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not self.server.closing.is_set():
                for key, _ in selector.select(timeout=0.5):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(RELAY_BUFFER)
                        if not data:
                            return
                        key.data.sendall(data)
                    except OSError:
                        return


class _RelayServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.closing = threading.Event()
        super().__init__(listen, _Relay)


@contextlib.contextmanager
def service_relay(api_host: str, api_port: int) -> Iterator[None]:
    """SERVICE_IP:443 relayed to the API server while the block runs."""
    server = _RelayServer((SERVICE_IP, SERVICE_PORT), (api_host, api_port))
    thread = threading.Thread(target=server.serve_forever, name="service-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()
        thread.join()
