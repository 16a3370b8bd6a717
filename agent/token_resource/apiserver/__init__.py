"""The API-server wing: talks to the Kubernetes API server, as the node or as a service account.

``client`` makes the HTTPS requests, ``credentials`` finds who the agent is (a kubeconfig or
the pod's service account) and which Node it runs on, ``node`` holds the calls on that Node and
``nodestatus`` keeps node-status resources true in its status; ``slices`` and ``publisher``
keep the DRA pools published as ResourceSlices, ``claims`` reads a ResourceClaim, and
``keeper`` is the retrying task both kinds of sync run in. It may import ``config``,
``observe`` and ``host``, never the kubelet wing.
"""
