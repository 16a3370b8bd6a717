//go:build tools

// The kwok command, required so that `go build sigs.k8s.io/kwok/cmd/kwok` resolves here.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
