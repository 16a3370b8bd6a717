// Command dramanager runs the Kubernetes 1.36 kubelet's plugin manager and DRA manager
// (tokenresource.test/kube/harness/dramanager); here only what 1.36's API makes differ.
package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"

	"tokenresource.test/kube/harness/dramanager"
)

type release struct{}

// handler: 1.36's PluginHandler methods take no context.
type handler struct {
	inner  cache.PluginHandler
	record *dramanager.Registrations
}

func (h handler) ValidatePlugin(name, endpoint string, versions []string) error {
	err := h.inner.ValidatePlugin(name, endpoint, versions)
	h.record.Validated(name, endpoint, versions, err)
	return err
}

func (h handler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.inner.RegisterPlugin(name, endpoint, versions, timeout)
	h.record.Registered(name, endpoint, versions, err)
	return err
}

func (h handler) DeRegisterPlugin(name, endpoint string) {
	h.inner.DeRegisterPlugin(name, endpoint)
	h.record.Deregistered(name, endpoint)
}

func (release) Handler(inner cache.PluginHandler, record *dramanager.Registrations) cache.PluginHandler {
	return handler{inner: inner, record: record}
}

// Stop: 1.36's Manager has none; canceling the context it was started with ends its work.
func (release) Stop(*dra.Manager) {}

// UpdateAllocatedResourcesStatus: 1.36's takes no logger.
func (release) UpdateAllocatedResourcesStatus(_ context.Context, manager *dra.Manager, pod *v1.Pod, status *v1.PodStatus) {
	manager.UpdateAllocatedResourcesStatus(pod, status)
}

func main() { dramanager.Main(release{}) }
