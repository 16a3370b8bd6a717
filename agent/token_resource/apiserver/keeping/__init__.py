"""What keeps each object true on the API server, a task each (``keeper``): the node's own
pools as ResourceSlices (``node_slices``, one sync of a scope's slices in ``slicesync``), the
driver's cluster pools written by the Lease's holder (``cluster_slices``, with the allocated
tokens from ``allocations``), node-status resources in the Node's capacity
(``node_capacity``), and the kubelet asked to prepare the pods it could not (``nudge``)."""
