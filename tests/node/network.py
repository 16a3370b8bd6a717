"""The node's addresses, and the way its pods reach the API server, all on this machine.

The kubelet refuses a loopback node IP and the machine has no dummy interfaces: the node's
address is on a bridge with no ports (``NODE_BRIDGE``). No kube-proxy runs: a pod's in-cluster
configuration dials the ``kubernetes`` Service (``SERVICE_IP``:443), which is an address of
that same bridge here, where a relay (``service_relay``) passes each connection on to the API
server on 127.0.0.1; the pods' CNI route sends the Service range to their bridge's gateway,
the host. Nothing is forwarded off the machine: no ip_forward, no NAT, nothing on eth0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.relay import TcpRelay

NODE_BRIDGE = "trnode0"
NODE_IP = "10.253.0.1"
POD_BRIDGE = "trpod0"
POD_SUBNET = "10.253.64.0/24"
SERVICE_RANGE = "10.96.0.0/16"  # the control plane's --service-cluster-ip-range
SERVICE_IP = "10.96.0.1"  # the "kubernetes" Service: the range's first address
SERVICE_PORT = 443


@contextlib.contextmanager
def service_relay(api_host: str, api_port: int) -> Iterator[None]:
    """SERVICE_IP:443 relayed to the API server while the block runs."""
    with TcpRelay((SERVICE_IP, SERVICE_PORT), (api_host, api_port)):
        yield
