"""Tests on a real Kubernetes node on this machine: the kubelet of 1.36 and 1.37 on containerd
2.x, with the real control plane of tests/kube (`make node-test`)."""
