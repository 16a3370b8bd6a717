"""The bounds the real node's tests hold each figure to: the figures docs/dra.md,
docs/kubernetes.md and docs/install.md publish (cold CI runs on a 2-core machine, 2026-12-05),
with a margin for a busy CI machine, never the worst case the kubelet allows. A bound is what
a regression crosses: the kubelet's own retry (its resync, a minute and up to half of one more
after a failed try) is far outside every one of them but the last."""

from __future__ import annotations

# After a reboot, from the kubelet's start to the token pods Ready in new containers, per way
# of advertising. DRA: 2.1-4.1 s measured (up to 9.3 s under load), so the minute resync fails
# it. A device plugin whose pods the kubelet rejected: their replacements, 11.0-11.6 s.
# node-status: 1.7-2.0 s.
# A DaemonSet's DRA agent, whose pod the kubelet starts first: 4.7 s on a quiet machine
# (2026-12-07), 23.0 s / 30.9 s on one running two test suites beside CI's; still half the
# resync's minute.
READY_AFTER_REBOOT = {"dra": 40.0, "device-plugin": 30.0, "node-status": 20.0}
# The exception: the host's agent started after the kubelet (not its unit's order,
# Before=kubelet.service) with DRA. Its node credentials may not nudge a pod, so the pods run
# when the kubelet syncs them: at once when the driver's health stream reports their devices
# (1.36, and 1.37 in most runs: 2.6-2.8 s), else at its resync (a 1.37 run of 2026-12-05:
# 89.5 s). Bounded by the resync, with the margin.
READY_AFTER_A_LATE_HOST_DRIVER = 120.0
# A claim allocated while the driver was away, from the driver's registration to its prepare:
# 0.04-0.23 s measured; the kubelet's own retry would be a minute.
PREPARED_AFTER_REGISTRATION = 5.0
# A package upgrade's handover on a kubelet that keeps one device-plugin endpoint per resource
# (1.36), from the old agent's leaving to the new one's registration: the successor is ready
# before, and registers once the lock is free. Elsewhere the bound is 0: the new agent is
# registered before the old one leaves. (The restart it replaced left 0.4-3.2 s, the new
# code's start included.)
UNREGISTERED_IN_A_HANDOVER = 1.5
# The pod made as an upgrade's handover begins, from its creation to Ready: as any pod (1.4-3.0
# s quiet, up to 10.6 s on a machine running two test suites beside CI's); on 1.36 a device
# plugin's, admitted in the moment between the two agents, would be rejected and replaced
# (about 11 s); a DRA pod prepared at the kubelet's resync fails it (60-90 s).
WINDOW_POD_READY = {"device-plugin": 30.0, "dra": 30.0, "node-status": 30.0}
# A helm upgrade that changes a restart-only setting ([metrics] on), from the upgrade to the old
# agent's pod gone and the new one Ready (device plugin): the rollout's new pod first, then the
# old one's grace. 8.8-9.1 s measured (2026-12-06, 1.36 and 1.37); without the chart's
# checksum/restart-settings annotation it never rolls.
ROLLED_BY_HELM = 30.0
