"""Tests against the real Kubernetes components, built from the Go module proxy (go/): the
kubelet's device manager and DRA manager of 1.36 and 1.37, and a 1.37 control plane."""
