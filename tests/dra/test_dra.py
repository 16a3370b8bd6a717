"""DRA resources: the real agent against the kubelet stand-in (plugin watcher, DRA manager) and
the API-server stand-in (ResourceSlices, ResourceClaims, the Node authorizer), over real
sockets and real HTTPS."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.dra.node import (
    DRIVER,
    ENV,
    NO_DRA_RESOURCE,
    NODE,
    POOL,
    TIMEOUT,
    TOKEN,
    allocate,
    claim_id,
    config,
    dra_resource,
    kubeconfig_of,
    node_kubelet,
    pool_of,
    registered,
    start_driver,
    status_json,
)
from tests.harness import AgentProcess
from tests.observe.samples import scrape, value
from tests.standin.apiserver import ApiServerStandin, ApiServerView, CertificateAuthority
from tests.standin.cdi import CdiRuntime, UnresolvableDevices
from tests.standin.kubelet import KubeletStandin, KubeletView

# --- registration and slices ---------------------------------------------------------------


def test_registers_as_a_driver_and_publishes_a_pool_of_its_tokens(
    serving: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin
) -> None:
    view = kubelet.snapshot()
    assert view.dra is not None
    (plugin,) = view.dra.drivers[DRIVER].plugins
    assert plugin.version == "v1.DRAPlugin"
    # The socket of this start: dra-<start>.sock (dra.registration.socket_paths).
    assert re.search(rf"/{DRIVER}/dra-[0-9a-f]{{8}}\.sock$", plugin.endpoint), plugin.endpoint
    [stored] = apiserver.snapshot().slices_of(NODE, DRIVER)
    assert stored["spec"]["pool"] == {"name": POOL, "generation": 1, "resourceSliceCount": 1}
    assert stored["spec"]["devices"][3] == {
        "name": "token-3",
        "attributes": {"resource": {"string": TOKEN}, "token": {"string": "token-3"}},
    }
    # The slices go with the Node object.
    assert stored["metadata"]["ownerReferences"][0]["kind"] == "Node"
    report = status_json(serving)
    assert report["dra"]["registered"] is True
    assert report["dra"]["slices_state"] == "accepted"
    [resource] = report["resources"]
    assert (resource["advertise"], resource["count"], resource["in_use"]) == ("dra", 4, 0)
    assert resource["slices"] == {"pool": POOL, "generation": 1, "slices": 1}
    serving.notify.wait_for(
        lambda lines: any(
            f"DRA driver {DRIVER}: registered, slices accepted: {TOKEN}=4" in line for line in lines
        )
    )


def test_slices_hold_128_devices_and_a_resize_is_a_new_generation(
    serving: AgentProcess, dirs: dict[str, Path], apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    serving.write_config(config(dirs, kubeconfig, dra_resource(300)))
    view = apiserver.wait_for(pool_of(300, generation=2), timeout=TIMEOUT)
    pool = view.pools(NODE, DRIVER)[POOL]
    assert pool.resource_slice_count == 3
    sizes = sorted(len(item["spec"]["devices"]) for item in view.slices_of(NODE, DRIVER))
    assert sizes == [44, 128, 128]
    assert pool.devices == tuple(f"token-{index}" for index in range(300))
    serving.write_config(config(dirs, kubeconfig, dra_resource(100)))
    view = apiserver.wait_for(pool_of(100, generation=3), timeout=TIMEOUT)
    assert len(view.slices_of(NODE, DRIVER)) == 1  # the other two deleted
    # Taken out of the files: the pool goes.
    serving.write_config(config(dirs, kubeconfig, NO_DRA_RESOURCE))
    apiserver.wait_for(lambda view: not view.slices_of(NODE, DRIVER), timeout=TIMEOUT)


def test_slices_wiped_by_a_starting_kubelet_are_published_again(
    serving: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin
) -> None:
    kubelet.restart()  # deletes every slice of the node, then registers the plugin again
    view = kubelet.wait_for(
        lambda view: registered(view) and view.dra is not None and view.dra.start_wipes >= 2,
        timeout=TIMEOUT,
    )
    assert view.dra is not None
    # A new generation: generations only grow, whoever deleted the old one.
    apiserver.wait_for(pool_of(4, generation=2), timeout=TIMEOUT)


def watching(view: ApiServerView) -> bool:
    """The agent's latest request is a watch of the node's slices: it is waiting for news."""
    return "watch=true" in view.requests[-1].query


def test_slices_deleted_behind_the_agents_back_are_published_again(
    serving: AgentProcess, apiserver: ApiServerStandin
) -> None:
    generation = 0
    for _ in range(3):
        apiserver.wait_for(watching, timeout=TIMEOUT)
        assert apiserver.delete_slices(node=NODE, driver=DRIVER)
        view = apiserver.wait_for(pool_of(4), timeout=TIMEOUT)
        assert view.pools(NODE, DRIVER)[POOL].generation > generation
        generation = view.pools(NODE, DRIVER)[POOL].generation
    # Seen by the watch (the first deletion may instead meet a sync already due).
    assert "deleted: publishing again" in serving.log()


# --- prepare and unprepare -----------------------------------------------------------------


def test_prepare_answers_with_the_tokens_and_their_cdi_spec_and_repeats_are_free(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
) -> None:
    # A UID that begins with a digit, as 10 in 16 do: its device name needs CDI 0.5.0.
    claim = allocate(apiserver, "web-1", "token-1", "token-3", uid=DIGIT_FIRST_UID)
    namespace, uid, name = claim_id(claim)
    result = kubelet.prepare(DRIVER, [(namespace, uid, name)])
    assert result.error is None
    cdi_id = f"{DRIVER}/claim={uid}-0"
    assert result.claims[uid].devices == (
        (("container-0-request-0-0",), POOL, "token-1", (cdi_id,)),
        (("container-0-request-0-0",), POOL, "token-3", ()),
    )
    # What the container runtime makes of the spec: the variable, and nothing refused.
    runtime = CdiRuntime([dirs["cdi"]])
    assert runtime.environment([cdi_id]) == {ENV: "token-1,token-3"}
    assert runtime.specs()[1] == {}
    spec = json.loads((dirs["cdi"] / f"{DRIVER}-{uid}.json").read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", f"{DRIVER}/claim")
    reads = len(claim_reads(apiserver))
    # The kubelet asks again (its own restart): the same answer, the claim not read again.
    assert kubelet.prepare(DRIVER, [(namespace, uid, name)]).claims == result.claims
    assert len(claim_reads(apiserver)) == reads
    report = status_json(serving)
    [resource] = report["resources"]
    assert (resource["in_use"], resource["free"]) == (2, 2)
    assert resource["holders"] == [
        {
            "namespace": "default",
            "pod": "web-1",
            "container": "",
            "device_ids": ["token-1", "token-3"],
            "claim": name,
        }
    ]
    assert f"default/web-1 (claim {name}): token-1, token-3" in serving.cli("status").stdout
    # Unprepared: the spec goes; unpreparing again, or a claim never seen, is no error.
    for _ in range(2):
        done = kubelet.unprepare(DRIVER, [(namespace, uid, name), ("default", "nope", "x")])
        assert done.error is None
        assert done.claims[uid].error == ""
    assert not (dirs["cdi"] / f"{DRIVER}-{uid}.json").exists()
    assert status_json(serving)["resources"][0]["in_use"] == 0


DIGIT_FIRST_UID = "8ec1876b-170f-42d6-8eed-6a902ceca2ec"  # a claim UID seen on a real node


def claim_reads(apiserver: ApiServerStandin) -> list[Any]:
    return [
        request
        for request in apiserver.snapshot().requests
        if request.method == "GET" and "/resourceclaims/" in request.path
    ]


def test_claims_are_read_over_one_kept_connection_made_anew_when_cut_or_reconfigured(
    serving: AgentProcess,
    dirs: dict[str, Path],
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    tmp_path: Path,
) -> None:
    def prepare(pod: str) -> None:
        claim = claim_id(allocate(apiserver, pod, "token-0"))
        assert kubelet.prepare(DRIVER, [claim]).claims[claim[1]].error == ""
        assert kubelet.unprepare(DRIVER, [claim]).claims[claim[1]].error == ""

    for pod in ("web-0", "web-1", "web-2"):
        prepare(pod)
    # Cut as an idle connection is, then a restart of the API server: the read on the kept
    # connection fails and is made again on a new one, once; so is the first after a reload
    # that names other credentials.
    apiserver.drop_connections()
    prepare("web-3")
    apiserver.stop()
    apiserver.start()
    prepare("web-4")
    other = apiserver.write_kubeconfig(
        tmp_path / "other.conf", identity=apiserver.ca.node_certificate(NODE)
    )
    serving.write_config(config(dirs, other, dra_resource(4)))
    assert serving.cli("reload").returncode == 0
    prepare("web-5")
    prepare("web-6")
    connections = [request.connection for request in claim_reads(apiserver)]
    assert len(connections) == 7, connections
    first, cut, restarted, reloaded = connections[0], connections[3], connections[4], connections[5]
    assert connections == [first] * 3 + [cut, restarted, reloaded, reloaded]
    assert len({first, cut, restarted, reloaded}) == 4


def test_a_claim_refused_as_unauthenticated_on_the_kept_connection_is_read_with_new_credentials(
    serving: AgentProcess,
    dirs: dict[str, Path],
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    tmp_path: Path,
) -> None:
    # A token that expires and is replaced in the kubeconfig, as a rotated client certificate
    # or the service account's refreshed token is: the settings stay the same.
    kubeconfig = tmp_path / "rotated.conf"
    apiserver.add_token("first")
    apiserver.write_kubeconfig(kubeconfig, token="first")
    serving.write_config(config(dirs, kubeconfig, dra_resource(4)))
    assert serving.cli("reload").returncode == 0
    claims = [claim_id(allocate(apiserver, pod, "token-0")) for pod in ("web-0", "web-1")]
    assert kubelet.prepare(DRIVER, [claims[0]]).claims[claims[0][1]].error == ""
    apiserver.add_token("second")
    apiserver.write_kubeconfig(kubeconfig, token="second")
    apiserver.remove_token("first")
    assert kubelet.prepare(DRIVER, [claims[1]]).claims[claims[1][1]].error == ""
    reads = [(request.status, request.connection) for request in claim_reads(apiserver)]
    assert [status for status, _ in reads] == [200, 401, 200]
    assert reads[0][1] == reads[1][1] != reads[2][1]


def test_each_request_of_a_claim_is_a_cdi_device_of_its_own(
    serving: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin
) -> None:
    # Two containers, one token each: each container gets only its request's devices.
    claim = apiserver.allocate_claim(
        "default",
        "two",
        pod="pair",
        node=NODE,
        driver=DRIVER,
        results=[("first", POOL, "token-0"), ("second", POOL, "token-2")],
    )
    namespace, uid, name = claim_id(claim)
    devices = kubelet.prepare(DRIVER, [(namespace, uid, name)]).claims[uid].devices
    assert devices == (
        (("first",), POOL, "token-0", (f"{DRIVER}/claim={uid}-0",)),
        (("second",), POOL, "token-2", (f"{DRIVER}/claim={uid}-1",)),
    )


def test_claims_that_cannot_be_prepared_say_why_and_others_are_prepared(
    serving: AgentProcess, kubelet: KubeletStandin, apiserver: ApiServerStandin
) -> None:
    good = claim_id(allocate(apiserver, "good", "token-0"))
    too_far = claim_id(allocate(apiserver, "far", "token-9"))
    elsewhere = claim_id(
        apiserver.allocate_claim(
            "default",
            "elsewhere",
            pod="other",
            node="node-b",
            driver=DRIVER,
            results=[("r", POOL, "token-1")],
        )
    )
    # Deleted after the scheduler allocated it (its pod still names it).
    gone = claim_id(allocate(apiserver, "gone", "token-1"))
    apiserver.delete_claim(gone[0], gone[2])
    # Never made: the Node authorizer does not even say whether it exists.
    missing = ("default", "0000-missing", "missing")
    result = kubelet.prepare(DRIVER, [good, too_far, elsewhere, gone, missing])
    assert result.claims[good[1]].error == ""
    assert "token-9 is not one of the 4 token(s) of example.com/token" in (
        result.claims[too_far[1]].error
    )
    # The Node authorizer: a claim no pod of this node uses is not the node's to read.
    assert "403" in result.claims[elsewhere[1]].error
    assert "ResourceClaim default/gone-tokens does not exist" in result.claims[gone[1]].error
    assert "403" in result.claims[missing[1]].error
    # A claim deleted before the kubelet unprepares it is released all the same.
    apiserver.delete_claim(good[0], good[2])
    assert kubelet.unprepare(DRIVER, [good]).claims[good[1]].error == ""


def test_an_agent_restart_changes_nothing_for_prepared_claims(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
) -> None:
    claim = claim_id(allocate(apiserver, "web-1", "token-2"))
    before = kubelet.prepare(DRIVER, [claim]).claims
    assert serving.stop() == 0
    (dirs["cdi"] / f"{DRIVER}-{claim[1]}.json").unlink()  # /var/run after a reboot
    reads = len(claim_reads(apiserver))
    serving.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    assert kubelet.prepare(DRIVER, [claim]).claims == before
    assert len(claim_reads(apiserver)) == reads
    assert (dirs["cdi"] / f"{DRIVER}-{claim[1]}.json").exists()
    assert status_json(serving)["resources"][0]["in_use"] == 1


@pytest.mark.parametrize("instance", [None, "2e93a00e-5755-435b-bb81-dfc9caf5593e"])
def test_a_killed_agent_started_again_is_registered_once_and_never_away(
    dra_agent: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
    tmp_path: Path,
    instance: str | None,
) -> None:
    """A crash and its restart (systemd's Restart=, or the container restarted in its pod, the
    same instance): the new start's sockets are new names, registered beside the dead ones,
    which the agent removes once the kubelet has it. Made again at the dead ones' paths, the
    kubelet would drop the driver for its reconciler's pass (kubelet_plugins.py)."""
    env = {} if instance is None else {"TOKEN_RESOURCE_INSTANCE": instance}
    start_driver(dra_agent, dirs, apiserver, kubelet, tmp_path, dra_resource(4), env=env)
    dead = sorted(dirs["reg"].iterdir())
    assert dra_agent.process is not None
    dra_agent.process.kill()
    dra_agent.process.wait()
    assert all(path.exists() for path in dead)  # a killed agent's sockets stay behind
    dra_agent.start(env=env)

    def counts(view: KubeletView) -> tuple[int, int, int]:
        assert view.dra is not None
        driver = view.dra.drivers[DRIVER]
        return driver.registrations, driver.deregistrations, driver.unregistered

    # Registered anew, then the dead plugin dropped, and the driver never without a plugin.
    kubelet.wait_for(lambda view: counts(view)[:2] == (2, 1), timeout=TIMEOUT)
    assert counts(kubelet.snapshot()) == (2, 1, 0)
    assert not any(path.exists() for path in dead)
    assert len(list(dirs["reg"].iterdir())) == 1
    claim = claim_id(allocate(apiserver, "web-1", "token-1"))
    assert kubelet.prepare(DRIVER, [claim]).error is None


def test_an_agent_started_over_specs_an_earlier_version_wrote_rewrites_them(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
) -> None:
    """Earlier builds (up to 68301fc) wrote every spec as CDI 0.3.0: a runtime refuses the
    spec of a claim whose UID begins with a digit, and the kubelet retries its container with
    the CDI IDs it has, never preparing the claim again; the new agent repairs it at start."""
    claims = [
        claim_id(allocate(apiserver, f"web-{n}", f"token-{n}", uid=f"{first}{DIGIT_FIRST_UID[1:]}"))
        for n, first in enumerate("0a9")
    ]
    cdi_ids = {
        uid: kubelet.prepare(DRIVER, [(ns, uid, name)]).claims[uid].devices[0][3][0]
        for ns, uid, name in claims
    }
    assert serving.stop() == 0
    for _, uid, _ in claims:
        path = dirs["cdi"] / f"{DRIVER}-{uid}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "cdiVersion": "0.3.0"}))
    runtime = CdiRuntime([dirs["cdi"]])
    with pytest.raises(
        UnresolvableDevices, match=re.escape("the spec version must be at least v0.5.0")
    ):
        runtime.environment([cdi_ids[claims[0][1]]])
    assert runtime.environment([cdi_ids[claims[1][1]]]) == {ENV: "token-1"}
    prepares = prepare_calls(kubelet)
    serving.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    assert "DRA: 3 claim(s) prepared by an earlier run" in serving.log()
    for n, (_, uid, _) in enumerate(claims):
        assert runtime.environment([cdi_ids[uid]]) == {ENV: f"token-{n}"}
    assert runtime.specs()[1] == {}
    assert prepare_calls(kubelet) == prepares


def prepare_calls(kubelet: KubeletStandin) -> int:
    view = kubelet.snapshot().dra
    assert view is not None
    return len(view.drivers[DRIVER].prepares)


def test_a_v1beta1_kubelet_is_served_v1beta1(
    dra_agent: AgentProcess, dirs: dict[str, Path], apiserver: ApiServerStandin, tmp_path: Path
) -> None:
    with node_kubelet(dirs, apiserver, dra_versions=("v1beta1.DRAPlugin",)) as kubelet:
        dra_agent.write_config(config(dirs, kubeconfig_of(apiserver, tmp_path), dra_resource(2)))
        dra_agent.start()
        view = kubelet.wait_for(registered, timeout=TIMEOUT)
        assert view.dra is not None
        assert view.dra.drivers[DRIVER].plugins[0].version == "v1beta1.DRAPlugin"
        claim = claim_id(allocate(apiserver, "old", "token-1"))
        assert kubelet.prepare(DRIVER, [claim]).claims[claim[1]].devices[0][2] == "token-1"


# --- what the API server refuses -----------------------------------------------------------


def test_a_cluster_without_dra_is_named_with_the_version_needed(
    dra_agent: AgentProcess, dirs: dict[str, Path], ca: CertificateAuthority, tmp_path: Path
) -> None:
    with ApiServerStandin(ca, nodes=(NODE,), resource_versions=()) as old:
        dra_agent.write_config(config(dirs, kubeconfig_of(old, tmp_path), dra_resource(2)))
        dra_agent.start()
        reason = "DRA resources need Kubernetes 1.34 or newer"
        dra_agent.notify.wait_for(lambda lines: any(reason in line for line in lines))
        report = status_json(dra_agent)
        assert report["dra"]["slices_state"] == "failing"
        assert "does not serve resource.k8s.io/v1" in report["dra"]["slices_error"]
        assert dra_agent.log().count("resource slices not applied") == 1


def test_another_nodes_credentials_are_refused_and_said_so(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    # node-b's identity publishing node-a's slices: NodeRestriction says no.
    wrong = kubeconfig_of(apiserver, tmp_path, node="node-b")
    dra_agent.write_config(config(dirs, wrong, dra_resource(2)))
    dra_agent.start()
    dra_agent.notify.wait_for(
        lambda lines: any("slices failing" in line and "403" in line for line in lines)
    )
    assert not apiserver.snapshot().slices_of(NODE, DRIVER)
    # Put right with a reload: published.
    dra_agent.write_config(config(dirs, kubeconfig_of(apiserver, tmp_path), dra_resource(2)))
    apiserver.wait_for(pool_of(2), timeout=TIMEOUT)


def test_a_resource_taken_out_of_the_files_still_has_its_claims_unprepared(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
    tmp_path: Path,
) -> None:
    # The DRA service stays while the agent runs: a pod deleted after its resource went from
    # the files is released at once (on a real 1.36.2 node, 0.2 s after the deletion), where a
    # stopped driver leaves it Terminating.
    claim = claim_id(allocate(apiserver, "web-1", "token-2"))
    namespace, uid, name = claim
    assert kubelet.prepare(DRIVER, [claim]).error is None
    spec = dirs["cdi"] / f"{DRIVER}-{uid}.json"
    state = dirs["plugins"] / DRIVER / "prepared.json"
    assert spec.exists()
    serving.write_config(config(dirs, kubeconfig_of(apiserver, tmp_path), NO_DRA_RESOURCE))
    apiserver.wait_for(lambda view: not view.slices_of(NODE, DRIVER), timeout=TIMEOUT)
    # No resource report holds the claim now; the driver's list still does, and names its pod.
    report = status_json(serving)
    assert [resource["name"] for resource in report["resources"]] == ["example.com/other"]
    assert report["dra"]["claims"] == [{"namespace": namespace, "name": name, "pods": ["web-1"]}]
    listed = serving.cli("status", "--prepared-claims")
    assert (listed.returncode, listed.stdout) == (0, f"default/web-1 (claim {name})\n")
    # The pod is deleted: the kubelet unprepares its claim.
    done = kubelet.unprepare(DRIVER, [claim])
    assert done.error is None
    assert done.claims[uid].error == ""
    assert not spec.exists()
    assert json.loads(state.read_text())["claims"] == {}
    assert status_json(serving)["dra"]["claims"] == []
    listed = serving.cli("status", "--prepared-claims")
    assert (listed.returncode, listed.stdout) == (0, "")
    kubelet.wait_for(registered, timeout=TIMEOUT)


def test_an_agent_restarted_without_dra_resources_still_serves_its_prepared_claims(
    serving: AgentProcess,
    kubelet: KubeletStandin,
    apiserver: ApiServerStandin,
    dirs: dict[str, Path],
    tmp_path: Path,
) -> None:
    # Restarted (an upgrade, a reboot) after the DRA resource left its files, with a claim
    # still prepared: the driver comes back for it, else its pod, once deleted, would stay
    # Terminating. Once nothing is on record, a later start serves no driver.
    claim = claim_id(allocate(apiserver, "web-1", "token-2"))
    assert kubelet.prepare(DRIVER, [claim]).error is None
    assert serving.stop() == 0
    start_driver(serving, dirs, apiserver, kubelet, tmp_path, NO_DRA_RESOURCE)
    assert "serving 1 claim(s) prepared before" in serving.log()
    assert status_json(serving)["dra"]["claims"][0]["name"] == claim[2]
    assert kubelet.unprepare(DRIVER, [claim]).error is None
    assert not (dirs["cdi"] / f"{DRIVER}-{claim[1]}.json").exists()
    assert serving.stop() == 0
    serving.start()
    assert status_json(serving)["dra"] is None
    assert not list(dirs["reg"].iterdir())


# --- moving a resource between the ways ----------------------------------------------------


def test_a_resource_moves_between_device_plugin_and_dra_with_a_reload(
    serving: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    kubeconfig = kubeconfig_of(apiserver, tmp_path)
    serving.write_config(config(dirs, kubeconfig, f'[resources]\n"{TOKEN}" = 4\n'))
    apiserver.wait_for(lambda view: not view.slices_of(NODE, DRIVER), timeout=TIMEOUT)
    kubelet.wait_for(lambda view: view.counts() == {TOKEN: 4}, timeout=TIMEOUT)
    serving.write_config(config(dirs, kubeconfig, dra_resource(4)))
    apiserver.wait_for(pool_of(4), timeout=TIMEOUT)
    kubelet.wait_for(lambda view: view.counts() == {TOKEN: 0}, timeout=TIMEOUT)


def test_prepares_and_unprepares_are_counted_in_the_metrics(
    dra_agent: AgentProcess,
    dirs: dict[str, Path],
    apiserver: ApiServerStandin,
    kubelet: KubeletStandin,
    tmp_path: Path,
) -> None:
    metrics = '[metrics]\nlisten = "127.0.0.1:0"\n'
    dra_agent.write_config(
        config(dirs, kubeconfig_of(apiserver, tmp_path), metrics + dra_resource(4))
    )
    dra_agent.start()
    kubelet.wait_for(registered, timeout=TIMEOUT)
    found = re.search(r"metrics: serving (http://\S+/metrics)", dra_agent.log())
    assert found, dra_agent.log()
    claim = claim_id(allocate(apiserver, "web-1", "token-0"))
    kubelet.prepare(DRIVER, [claim, ("default", "0000-missing", "missing")])
    kubelet.unprepare(DRIVER, [claim])
    samples = scrape(found[1])
    assert value(samples, "token_resource_dra_prepares_total", result="ok") == 1
    assert value(samples, "token_resource_dra_prepares_total", result="failed") == 1
    assert value(samples, "token_resource_dra_unprepares_total", result="ok") == 1
    assert value(samples, "token_resource_tokens_configured", resource=TOKEN) == 4
    assert value(samples, "token_resource_registered", resource=TOKEN) == 1
