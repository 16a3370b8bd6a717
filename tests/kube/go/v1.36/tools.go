//go:build tools

// The kubelet of this release for the real node (tests/node), built from its own main package
// (k8s.io/kubernetes/cmd/kubelet): required here so that the module holds what it needs.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
