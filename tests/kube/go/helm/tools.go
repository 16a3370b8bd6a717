//go:build tools

// Package tools pins helm's command as a dependency of this module: `go build
// helm.sh/helm/v4/cmd/helm` builds it from the module cache.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
