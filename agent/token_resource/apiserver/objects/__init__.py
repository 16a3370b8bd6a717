"""The API server's objects the agent reads and writes, as it shapes them: its Node and the
annotation listing its resources (``node``), ResourceSlices of a pool (``slices``) and the
ResourceClaims the kubelet asks it to prepare (``claims``)."""
