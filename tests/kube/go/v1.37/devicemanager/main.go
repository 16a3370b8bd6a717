// The kubelet's device manager of Kubernetes 1.37, driven over standard input and output
// (tokenresource.test/kube/harness/devicemanager); this file adapts the calls whose
// signatures are 1.37's own.
package main

import (
	"context"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	harness "tokenresource.test/kube/harness/devicemanager"
)

type parts struct {
	*devicemanager.ManagerImpl
	topology topologymanager.Manager
}

// newParts: as the kubelet's container manager builds them (container_manager_linux.go),
// with the "none" topology policy and no NUMA topology.
func newParts(logger klog.Logger) (harness.Parts, error) {
	topology, err := topologymanager.NewManager(logger, nil, topologymanager.PolicyNone, topologymanager.ContainerTopologyScope, nil)
	if err != nil {
		return nil, err
	}
	manager, err := devicemanager.NewManagerImpl(logger, nil, topology)
	if err != nil {
		return nil, err
	}
	topology.AddHintProvider(logger, manager)
	return &parts{manager, topology}, nil
}

func (p *parts) Capacity(logger klog.Logger) (v1.ResourceList, v1.ResourceList, []string) {
	return p.GetCapacity(logger)
}

func (p *parts) Admit(ctx context.Context, attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	return p.topology.Admit(ctx, attrs)
}

func (p *parts) ResourcesStatus(logger klog.Logger, pod *v1.Pod, status *v1.PodStatus) {
	p.UpdateAllocatedResourcesStatus(logger, pod, status)
}

func main() {
	os.Exit(harness.Main(newParts))
}
