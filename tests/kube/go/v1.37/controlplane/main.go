// Command controlplane runs one of the real control-plane components of this Kubernetes
// release: `controlplane kube-apiserver|kube-scheduler|kube-controller-manager [flags]`, each
// with the upstream command's own flags. One binary instead of three links the shared code once.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: controlplane kube-apiserver|kube-scheduler|kube-controller-manager [flags]")
		os.Exit(2)
	}
	command := commands[os.Args[1]]()
	command.SetArgs(os.Args[2:])
	os.Exit(cli.Run(command))
}
