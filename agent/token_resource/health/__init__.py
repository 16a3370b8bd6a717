"""The health wing: talks to what the tokens stand for (a license server's port, a dongle's
device node, an upstream service) through each resource's probe, and says which tokens are
usable (``state``). The probes (``probes``) run on the event loop, each bounded by its timeout;
the monitor (``monitor``) runs them at their intervals and applies the thresholds."""
