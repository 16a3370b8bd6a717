"""cluster-pools.md's worked example in a running publisher against the API-server stand-in:
an rlm probe, with a stand-in rlmutil, whose free seats the pool offers beside the allocated
token, and none (every token tainted) when the server is down or the tool is missing; and a
flexlm probe whose stand-in lmutil's count the offer follows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.documented import replaced, toml_example
from tests.publisher.cluster_publishers import (
    DRIVER,
    FAST,
    NAMESPACE,
    generation,
    newest_devices,
    publishers,
    status_of,
)
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.license_tools import LMSTAT_DOWN, RLMSTAT_DOWN, LicenseTool, lmstat, rlmstat
from token_resource.apiserver.objects.slices import cluster_pool_name

SOLVER = "example.com/solver"


@pytest.fixture
def apiserver(ca: CertificateAuthority) -> Iterator[ApiServerStandin]:
    with ApiServerStandin(ca, nodes=("node-a",)) as standin:
        yield standin


def tainted(view: ApiServerView) -> list[str]:
    return [device["name"] for device in newest_devices(view) if device.get("taints")]


def kubernetes_table(kubeconfig: Path) -> str:
    return f'[kubernetes]\nkubeconfig = "{kubeconfig}"\nlease_namespace = "{NAMESPACE}"\n{FAST}'


def test_the_documented_rlm_probe_offers_the_free_seats_and_taints_all_on_error(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    rlmutil = LicenseTool(tmp_path / "bin", "rlmutil")
    rlmutil.serve(rlmstat("solver", 8, 3, reserved=1))
    example = toml_example("cluster-pools.md", 'rlm = "5053@licsrv"')
    assert f'driver = "{DRIVER}"' in example
    example = replaced(example, '"/opt/rlm/rlmutil"', json.dumps(str(rlmutil.path)))
    # A check a second, a seat's loss seen at the first.
    example = replaced(example, "interval = 30", "interval = 1\nfailure_threshold = 1")
    with publishers(apiserver, tmp_path, 1, tokens=8, resources=(SOLVER,)) as running:
        (publisher,) = running.values()
        apiserver.wait_for(lambda v: generation(v) is not None)
        # A pod runs with token-5: its seat is among the 3 the server counts in use.
        apiserver.allocate_claim(
            "default",
            "seat",
            pod="solver",
            node="node-a",
            driver=DRIVER,
            results=[("license", cluster_pool_name(SOLVER), "token-5")],
        )
        publisher.write_config(kubernetes_table(tmp_path / "p0.conf") + example)
        # 8 - 3 in use - 1 reserved: 4 free, offered beside the allocated token-5.
        apiserver.wait_for(lambda v: tainted(v) == ["token-4", "token-6", "token-7"])
        report = status_of(publisher)["cluster_pools"]["pools"][0]
        assert (report["resource"], report["healthy"], report["allocated"]) == (SOLVER, 5, 1)
        rlmutil.serve(RLMSTAT_DOWN, 255)
        apiserver.wait_for(lambda v: len(tainted(v)) == 8)
        reasons = {
            entry["reason"]
            for entry in next(r for r in status_of(publisher)["resources"] if r["name"] == SOLVER)[
                "health"
            ]["unhealthy"]
        }
        assert reasons == {
            "rlm 5053@licsrv product solver: rlmutil exited with status 255: Error connecting to "
            '"rlm" server on licsrv (port 5053)'
        }
        rlmutil.serve(rlmstat("solver", 8, 1))
        apiserver.wait_for(lambda v: tainted(v) == [])
        rlmutil.path.unlink()
        apiserver.wait_for(lambda v: len(tainted(v)) == 8)
        assert set(rlmutil.calls()) == {"rlmstat -c 5053@licsrv -a"}


def test_a_flexlm_probe_offers_what_its_server_counts_free(
    apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    lmutil = LicenseTool(tmp_path / "bin", "lmutil")
    lmutil.serve(lmstat("solver", 5, 2))
    resource = (
        f'[resources."{SOLVER}"]\ncount = 5\nadvertise = "dra"\nscope = "cluster"\n'
        f'probe = {{ flexlm = "27000@lic-a:27000@lic-b", feature = "solver", '
        f"lmutil = {json.dumps(str(lmutil.path))}, interval = 1, failure_threshold = 1 }}\n"
        f'[dra]\ndriver = "{DRIVER}"\n'
    )
    with publishers(apiserver, tmp_path, 1, resources=(SOLVER,)) as running:
        (publisher,) = running.values()
        apiserver.wait_for(lambda v: generation(v) is not None)
        publisher.write_config(kubernetes_table(tmp_path / "p0.conf") + resource)
        apiserver.wait_for(lambda v: tainted(v) == ["token-3", "token-4"])
        lmutil.serve(lmstat("solver", 5, 4))
        apiserver.wait_for(lambda v: tainted(v) == ["token-1", "token-2", "token-3", "token-4"])
        lmutil.serve(LMSTAT_DOWN, 1)
        apiserver.wait_for(lambda v: len(tainted(v)) == 5)
        assert set(lmutil.calls()) == {"lmstat -c 27000@lic-a:27000@lic-b -f solver"}
