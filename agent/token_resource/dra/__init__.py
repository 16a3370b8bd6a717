"""The DRA wing: talks to the kubelet's plugin watcher and DRA manager, and to the container
runtime through CDI spec files.

The agent registers as a DRA driver (``registration``), prepares and unprepares the claims the
kubelet hands it (``service``, keeping what it prepared on disk in ``prepared``), tells the
container its tokens through a CDI spec (``cdi``), and keeps its pools published as
ResourceSlices through the API-server wing (``driver`` puts it together). It may import the
API-server and kubelet wings, ``config``, ``observe``, ``host`` and ``protocol``.
"""
