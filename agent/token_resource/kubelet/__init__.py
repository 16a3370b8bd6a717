"""The kubelet wing: talks to the kubelet's device manager and its PodResources API.

One gRPC server per device-plugin resource (``plugin``, ``servicer``, ``tokens``), registered
through ``kubelet.sock`` (``registration``), kept so by the ``reconciler`` as the kubelet comes
and goes; ``sockets`` names the files, ``allocation`` reads who holds the tokens. It may import
``config``, ``observe``, ``protocol`` and ``host``, never the API-server wing.
"""
