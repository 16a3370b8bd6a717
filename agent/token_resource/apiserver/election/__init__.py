"""Leader election over a ``coordination.k8s.io/v1`` Lease, with client-go's rules: what a
candidate makes of the record it read (``record``, free of I/O) and the candidate that runs
for it, renews it and gives it up (``elector``)."""
