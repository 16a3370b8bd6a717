"""The agent as the shipped DaemonSet on a real node (the kubelet of 1.36, then 1.37, on
containerd 2.x, the image imported as docs/kubernetes.md says), in each way of advertising.

- The overlay as shipped (``kubectl apply -k deploy/kubernetes/...``): the token-demo example
  runs to the count and the replica over it waits with the scheduler's message; a ``kubectl
  rollout restart`` disturbs no running pod, a pod created during it gets its token, and on
  1.37 a device plugin's Node never offers fewer tokens; a reboot: the agent is a pod the
  kubelet starts, so always after it (a device plugin's pods are rejected, once; with DRA none
  is, and a claim allocated while the driver was away is prepared within seconds of its
  registration: the prepare retries); with DRA, the agent's container restarted in its pod
  registers the driver once.
- The chart as ``helm install`` puts it, with a probe in its values: a failing probe takes the
  tokens away and a new pod waits, back again it runs (with DRA, the cluster pool's probe runs
  RLM's tool, which the publisher's pods find in a volume the values add); a ``helm upgrade``
  that raises a device plugin's count runs one more pod and disturbs none, restarting nothing;
  one that turns [metrics] on rolls the agent's pod, whose successor serves the port, and
  disturbs none.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.kube.client import wait_until
from tests.node.bounds import PREPARED_AFTER_REGISTRATION, ROLLED_BY_HELM
from tests.node.daemonset import AGENT, METRICS_PORT, NAMESPACE, ChartForm, DaemonSetForm
from tests.node.demo import Demo
from tests.node.figures import Figures, log_time
from tests.node.licenses import (
    RLMUTIL_DIR,
    license_server,
    probes_take_the_tokens_away,
    rlm_probe,
    rlmutil_standin,
)
from tests.node.modes import DRIVER, TOKEN, Mode
from tests.node.node import RealNode
from tests.node.pods import PodView
from tests.node.steps import (
    REJECTED,
    measured_reboot,
    offered_meanwhile,
    to_the_count,
    undisturbed,
)
from tests.observe.samples import scrape, value

# The plugin manager's reconciler, as it starts each operation on a registration socket.
OPERATION = re.compile(r"OperationExecutor\.(Register|Unregister)Plugin started")


def test_the_overlay_serves_rolls_out_and_reboots(
    node: RealNode, mode: Mode, demo: Demo, license_demo: Demo, figures: Figures
) -> None:
    form = DaemonSetForm(node, mode)
    try:
        form.apply()
        to_the_count(demo, mode)
        running = demo.scaled(1)
        running = a_rollout_disturbs_nothing(node, mode, form, demo, running, figures)
        if mode.dra:
            license_demo.apply()
            license_demo.scaled(1)
            a_container_restart_registers_the_driver_once(node, form)
        a_reboot(node, mode, form, demo, license_demo, running, figures)
    finally:
        demo.delete()
        license_demo.delete()
        form.delete()


def a_rollout_disturbs_nothing(
    node: RealNode,
    mode: Mode,
    form: DaemonSetForm,
    demo: Demo,
    before: list[PodView],
    figures: Figures,
) -> list[PodView]:
    """``kubectl rollout restart``, a second demo pod created while the new agent's pod is
    there: returns the two running."""
    plane = node.control_plane
    with offered_meanwhile(node, mode) as offered:
        plane.kubectl("rollout", "restart", "-n", NAMESPACE, "daemonset/token-resource")
        wait_until("the rollout's new agent pod", lambda: len(form.pods.of(AGENT, NAMESPACE)) == 2)
        demo.scale(2)
        plane.kubectl(
            "rollout", "status", "-n", NAMESPACE, "daemonset/token-resource",
            "--timeout=150s", timeout=160,
        )  # fmt: skip
        running = demo.running(2)
    undisturbed(demo, before)
    rejected = [pod.name for pod in demo.all() if pod.reason == REJECTED]
    figures.add(
        node.release,
        f"rollout, {mode.advertise}, DaemonSet",
        f"offered {min(offered)} to {max(offered)} tokens throughout; a pod created "
        f"meanwhile {'was rejected' if rejected else 'ran'}",
    )
    assert not rejected
    if mode.advertise == "device-plugin" and node.at_least("1.37"):
        assert min(offered) == 2, offered
    return running


def plugin_operation_lines(node: RealNode, since: int, instance: str) -> list[str]:
    """The kubelet's log lines after character ``since`` that start a Register or Unregister
    of one of the driver's sockets of ``instance`` (the agent pod's UID, in its sockets' names:
    an older pod of the rollout before may still be leaving), in order."""
    text = node.kubelet.log_text()[since:]
    return [
        line
        for line in text.splitlines()
        if f"{DRIVER}-{instance}-" in line and OPERATION.search(line)
    ]


def plugin_operations(lines: list[str]) -> list[str]:
    """Register or Unregister, in order, of ``lines`` (plugin_operation_lines)."""
    return [match.group(1) for line in lines if (match := OPERATION.search(line))]


def a_container_restart_registers_the_driver_once(node: RealNode, form: DaemonSetForm) -> None:
    """The agent's container killed (a crash, a liveness probe's kill) and started again in the
    same pod: the kubelet registers the new start's driver and then drops the dead one's, and
    never the driver (a Register, then an Unregister; a driver dropped and registered again a
    second later was Unregister, then Register)."""
    pod = form.agent_pod()
    since = len(node.kubelet.log_text())
    (container,) = pod.container_ids
    node.containerd.ctr("tasks", "kill", "--signal", "SIGKILL", container.split("://")[1])
    wait_until(
        "the agent's container started again, Ready",
        lambda: any(p.restarts == 1 and p.serving for p in form.pods.of(AGENT, NAMESPACE)),
    )
    wait_until(
        "the dead start's plugin dropped",
        lambda: "Unregister" in plugin_operations(plugin_operation_lines(node, since, pod.uid)),
    )
    # One read of the log for the check and its message: a line logged between two reads would
    # make the message show other operations than the ones checked.
    lines = plugin_operation_lines(node, since, pod.uid)
    assert plugin_operations(lines) == ["Register", "Unregister"], (lines, form.logs())


def a_reboot(
    node: RealNode,
    mode: Mode,
    form: DaemonSetForm,
    demo: Demo,
    license_demo: Demo,
    before: list[PodView],
    figures: Figures,
) -> None:
    """A reboot; with DRA, while the node is down, a second license pod is scheduled there and
    its claim allocated from the cluster pool: a pod new to the node, which the kubelet would
    try again only at its resync."""
    licensed = {pod.uid for pod in license_demo.all()}

    def while_away() -> None:
        if mode.dra:
            license_demo.scale(2)
            wait_until(
                "the new license pod bound to the node, its claim allocated",
                lambda: any(pod.node and pod.uid not in licensed for pod in license_demo.all()),
            )

    rejected, _ = measured_reboot(
        node, mode, demo, before, figures, "DaemonSet",
        lambda: node.reboot(before_kubelet=while_away),
    )  # fmt: skip
    assert (rejected > 0) == (mode.advertise == "device-plugin")
    if mode.dra:
        license_demo.running(2, timeout=120)
        form.wait_ready()
        log = form.logs()
        lines = log.splitlines()
        registered = log_time(next(line for line in lines if "registered with the kubelet" in line))
        prepared = max(log_time(line) for line in lines if "prepared: example.com/license" in line)
        seconds = (prepared - registered).total_seconds()
        figures.add(
            node.release,
            "reboot, dra, DaemonSet: a claim allocated while the driver was away",
            f"prepared {seconds:.2f} s after the driver registered",
        )
        assert "asked the kubelet to prepare" in log, log
        # Over the bound, the prepare retry did not work: the kubelet's own retry comes at its
        # resync, a minute and up to half of one more after its failed try.
        assert seconds <= PREPARED_AFTER_REGISTRATION, (
            f"the license claim prepared {seconds:.2f} s after the driver registered, over "
            f"the bound of {PREPARED_AFTER_REGISTRATION:.0f} s\n{log}"
        )


def test_the_chart_with_a_probe_and_a_helm_upgrade(
    node: RealNode,
    mode: Mode,
    chart: ChartForm,
    demo: Demo,
    license_demo: Demo,
    figures: Figures,
    tmp_path: Path,
) -> None:
    with license_server() as server:
        if mode.dra:
            # The cluster pool's probe through RLM's tool, which the publisher's pods find in
            # a volume of the chart's values (clusterPools.publisher).
            tool = rlmutil_standin(tmp_path / "rlm", seats=3)
            mount = {"name": "rlm", "mountPath": RLMUTIL_DIR, "readOnly": True}
            volume = {"name": "rlm", "hostPath": {"path": str(tool), "type": "Directory"}}
            publisher = {"volumes": [volume], "volumeMounts": [mount]}
            chart.install(3, server.probe, 3, rlm_probe(server), publisher)
        else:
            chart.install(3, server.probe, licenses=3)
        probes_take_the_tokens_away(node, mode, server, demo, license_demo)
        if mode.advertise != "device-plugin":
            # The new count's way to the agent is the kubelet's (the ConfigMap in its volume,
            # a minute), the same in every way of advertising; the agent's own apply of a
            # count is the host's live edit in each (test_host.py).
            return
        agent = chart.agent_pod()
        before = demo.running(3)
        demo.scale(4)
        demo.one_waiting()
        chart.upgrade(4, server.probe, licenses=3)
        # The kubelet brings the new ConfigMap into the agent's volume at its next sync of the
        # agent's pod (a minute and up to half of one more), and the agent applies it live.
        demo.running(4, timeout=180)
        undisturbed(demo, before)
        assert [(p.uid, p.restarts) for p in chart.pods.of(AGENT, NAMESPACE)] == [(agent.uid, 0)]
        metrics_turned_on(node, chart, demo, agent, server.probe, figures)


def metrics_turned_on(
    node: RealNode,
    chart: ChartForm,
    demo: Demo,
    replaced: PodView,
    probe: str,
    figures: Figures,
) -> None:
    """A ``helm upgrade`` that turns [metrics] on, which the agent reads only when it starts:
    the chart rolls the agent's pod (its checksum/restart-settings annotation), the new pod
    serves the port, and the token pods run on undisturbed."""
    running = demo.running(4)
    started = time.monotonic()
    chart.upgrade(4, probe, licenses=3, metrics=True)
    (agent,) = chart.pods.wait(
        "the agent's pod replaced by one that is Ready",
        AGENT,
        lambda pods: len(pods) == 1 and pods[0].uid != replaced.uid and pods[0].serving,
        NAMESPACE,
        timeout=2 * ROLLED_BY_HELM,
    )
    rolled = time.monotonic() - started
    figures.add(
        node.release, "helm upgrade with [metrics]: old agent pod gone (s)", f"{rolled:.1f}"
    )
    assert rolled <= ROLLED_BY_HELM, (
        f"the agent's pod rolled {rolled:.1f} s after the helm upgrade, over the bound of "
        f"{ROLLED_BY_HELM:.0f} s"
    )
    samples = scrape(f"http://{agent.ip}:{METRICS_PORT}/metrics")
    assert value(samples, "token_resource_tokens_configured", resource=TOKEN) == 4, samples
    assert agent.restarts == 0, agent
    undisturbed(demo, running)
