// Command kubectl is this release's real kubectl, as cmd/kubectl builds it: the tests apply
// the project's manifests with it. A fresh CI machine has none, and the Go module proxy
// serves its library (k8s.io/kubectl).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// The verbosity before the command is built, as upstream's main does: building it may log.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
