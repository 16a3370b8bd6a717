// The kubelet's device manager of Kubernetes 1.36, driven over standard input and output
// (tokenresource.test/kube/harness/devicemanager); this file adapts the calls whose
// signatures are 1.36's own (fewer logger and context arguments than 1.37's).
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
	topology, err := topologymanager.NewManager(nil, topologymanager.PolicyNone, topologymanager.ContainerTopologyScope, nil)
	if err != nil {
		return nil, err
	}
	manager, err := devicemanager.NewManagerImpl(nil, topology)
	if err != nil {
		return nil, err
	}
	topology.AddHintProvider(logger, manager)
	return &parts{manager, topology}, nil
}

func (p *parts) Capacity(klog.Logger) (v1.ResourceList, v1.ResourceList, []string) {
	return p.GetCapacity()
}

func (p *parts) Admit(_ context.Context, attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult {
	return p.topology.Admit(attrs)
}

func (p *parts) ResourcesStatus(_ klog.Logger, pod *v1.Pod, status *v1.PodStatus) {
	p.UpdateAllocatedResourcesStatus(pod, status)
}

func main() {
	os.Exit(harness.Main(newParts))
}
