"""The API-server wing: talks to the Kubernetes API server, as the node or as a service account.

Inside, from the bottom up: ``connection`` (HTTPS, credentials, kept connections, resumed
watches), ``objects`` (the Node, ResourceSlices and ResourceClaims as the agent shapes them),
``election`` (the cluster pools' Lease) and ``keeping`` (what keeps each of them true, in a
task of its own). It may import ``config``, ``observe`` and ``host``, never the kubelet wing.
"""
