"""The node of the DRA tests: its names, the agent's configuration for it, and what the tests
wait for and ask of the kubelet and API-server stand-ins (its fixtures: tests/dra/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.harness import AgentProcess
from tests.standin.apiserver import ApiServerStandin, ApiServerView, LoggedRequest
from tests.standin.kubelet import KubeletStandin, KubeletView
from tests.standin.test_kubelet_dra import access

NODE = "node-a"
DRIVER = "tokens.example.com"
TOKEN = "example.com/token"
POOL = f"{NODE}/example.com/token"
ENV = "TOKEN_RESOURCE_EXAMPLE_COM_TOKEN"
TIMEOUT = 30.0
# A configuration whose only resource is not a DRA one.
NO_DRA_RESOURCE = '[resources]\n"example.com/other" = 1\n'


def node_kubelet(
    dirs: dict[str, Path], apiserver: ApiServerStandin, **options: Any
) -> KubeletStandin:
    """The kubelet stand-in of the node, with its DRA directories and credentials."""
    return KubeletStandin(
        dirs["dp"],
        plugins_registry_dir=dirs["reg"],
        node=NODE,
        apiserver=access(apiserver),
        **options,
    )


def config(
    dirs: dict[str, Path],
    kubeconfig: Path,
    resources: str,
    *,
    node: str = NODE,
) -> str:
    return (
        f'[dra]\ndriver = "{DRIVER}"\nplugins_registry_dir = "{dirs["reg"]}"\n'
        f'plugins_dir = "{dirs["plugins"]}"\ncdi_dir = "{dirs["cdi"]}"\n'
        f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nnode_name = "{node}"\n'
        "resync_seconds = 30\n" + resources
    )


def dra_resource(count: int, name: str = TOKEN, env: str | None = None) -> str:
    text = f'[resources."{name}"]\ncount = {count}\nadvertise = "dra"\n'
    return text + (f'env = "{env}"\n' if env else "")


def kubeconfig_of(apiserver: ApiServerStandin, tmp_path: Path, node: str = NODE) -> Path:
    return apiserver.write_kubeconfig(
        tmp_path / f"{node}.conf", identity=apiserver.ca.node_certificate(node)
    )


def registered(view: KubeletView) -> bool:
    assert view.dra is not None
    driver = view.dra.drivers.get(DRIVER)
    return driver is not None and any(plugin.connected for plugin in driver.plugins)


def pool_of(count: int, generation: int | None = None) -> Callable[[ApiServerView], bool]:
    """A predicate: the pool holds ``count`` tokens, all of its slices present."""

    def holds(view: ApiServerView) -> bool:
        pool = view.pools(NODE, DRIVER).get(POOL)
        return (
            pool is not None
            and pool.complete
            and len(pool.devices) == count
            and (generation is None or pool.generation == generation)
            and not pool.stale_slices
        )

    holds.__qualname__ = f"pool {POOL} holds {count} token(s), generation {generation}"
    return holds


def start_driver(
    agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
    resources: str,
    env: Mapping[str, str] | None = None,
) -> None:
    """The agent started as the node's driver with ``resources`` (and ``env``), once the
    kubelet has it and its prepare retries have listed the node's pods
    (apiserver/keeping/nudge.py): before the test's own pods exist, whose claims they would
    read too."""
    listed = len(pod_lists(apiserver.snapshot()))
    agent.write_config(config(dirs, kubeconfig_of(apiserver, tmp_path), resources))
    agent.start(env=env)
    kubelet.wait_for(registered, timeout=TIMEOUT)
    apiserver.wait_for(lambda view: len(pod_lists(view)) > listed, timeout=TIMEOUT)


def pod_lists(view: ApiServerView) -> list[LoggedRequest]:
    return [r for r in view.requests if r.method == "GET" and r.path == "/api/v1/pods"]


def allocate(apiserver: ApiServerStandin, pod: str, *tokens: str, **options: Any) -> dict[str, Any]:
    """The scheduler's part: a claim for ``pod`` on the node, allocated these tokens."""
    results = [("container-0-request-0-0", POOL, token) for token in tokens]
    return apiserver.allocate_claim(
        "default", f"{pod}-tokens", pod=pod, node=NODE, driver=DRIVER, results=results, **options
    )


def claim_id(claim: dict[str, Any]) -> tuple[str, str, str]:
    metadata = claim["metadata"]
    return metadata["namespace"], metadata["uid"], metadata["name"]


def status_json(agent: AgentProcess) -> dict[str, Any]:
    return agent.status_json()
