"""The configuration wing: talks to the operator's files (the TOML main file and its drop-ins).

It reads, validates, merges and diffs them, and says which file events concern them; it imports
only the standard library, tomli, ``_compat`` and ``host`` (for file events), so ``check`` runs
without the agent's runtime libraries. Modules: ``model`` (what a valid configuration is),
``names`` (the kubelet's resource-name rules), ``errors`` (errors with file, line and key),
``sections`` (one file), ``probes`` (a resource's probe table), ``selectors`` (label
selectors, as apimachinery parses them), ``cluster`` (cluster-scoped resources and leader
election), ``load`` (all files, merged), ``diff``, ``watch`` (file events).

Everything here is pure apart from reading the files, so the agent can load a new configuration,
reject it with an operator-readable ConfigError, or diff it against the running one before
touching any device plugin.

The format (the main file and every drop-in share it)::

    [agent]
    device_plugin_dir = "/var/lib/kubelet/device-plugins"   # optional, absolute
    pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock"  # who holds tokens

    [resources]
    "example.com/token" = 2                # shorthand: a count

    [resources."example.com/license"]      # long form
    count = 5                              # required
    env = "LICENSE_SEATS"                  # optional; default: default_env_name(name)

    [resources."example.com/dongle"]
    count = 4
    advertise = "node-status"              # optional; default "device-plugin"; or "dra"

    [resources."example.com/seat"]
    count = 20
    advertise = "dra"
    scope = "cluster"                      # optional; default "node": each node its own count
    nodes = "license-zone in (a,b),!spot"  # optional, cluster scope only: a label selector

    [kubernetes]                           # API access, for node-status and DRA resources
    kubeconfig = "/etc/kubernetes/kubelet.conf"   # or in_cluster = true
    node_name = "node-1"                   # default: the host name, lower-cased
    resync_seconds = 300                   # each watch of the API server: this to twice it
    lease_duration_seconds = 15            # the cluster pools' publishers' leader election,
    renew_deadline_seconds = 10            # client-go's meaning, defaults and rule:
    retry_period_seconds = 2               # lease_duration > renew_deadline > 1.2 * retry
    lease_namespace = "token-resource"     # default: the pod's namespace, else the
                                           # kubeconfig context's, else this

    [metrics]                              # Prometheus metrics; both off by default
    textfile = "/var/lib/prometheus/node-exporter/token-resource.prom"  # node_exporter's
    listen = "127.0.0.1:9464"              # an HTTP listener (IP address and port)

Drop-ins (``<stem>.d/*.toml`` next to the main file, in lexical order) override the main file
key by key, as systemd's drop-ins do: a later file that sets a resource's ``count`` keeps the
``env`` an earlier file gave it. A later file takes a resource away with ``remove = true``::

    [resources."example.com/license"]
    remove = true

The main file must define something (an empty ``[resources]`` table serves nothing): an empty
main file is what a half-done write leaves, and is refused rather than served as "no resources".
"""
