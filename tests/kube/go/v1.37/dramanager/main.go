// Command dramanager runs the Kubernetes 1.37 kubelet's plugin manager and DRA manager
// (tokenresource.test/kube/harness/dramanager); here only what 1.37's API makes differ.
package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"

	"tokenresource.test/kube/harness/dramanager"
)

type release struct{}

// handler: 1.37's PluginHandler methods take a context.
type handler struct {
	inner  cache.PluginHandler
	record *dramanager.Registrations
}

func (h handler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := h.inner.ValidatePlugin(ctx, name, endpoint, versions)
	h.record.Validated(name, endpoint, versions, err)
	return err
}

func (h handler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.inner.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.record.Registered(name, endpoint, versions, err)
	return err
}

func (h handler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.inner.DeRegisterPlugin(ctx, name, endpoint)
	h.record.Deregistered(name, endpoint)
}

func (release) Handler(inner cache.PluginHandler, record *dramanager.Registrations) cache.PluginHandler {
	return handler{inner: inner, record: record}
}

// Stop: 1.37's Manager.Stop waits for the plugin manager's goroutines (health streams).
func (release) Stop(manager *dra.Manager) { manager.Stop() }

func (release) UpdateAllocatedResourcesStatus(ctx context.Context, manager *dra.Manager, pod *v1.Pod, status *v1.PodStatus) {
	manager.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), pod, status)
}

func main() { dramanager.Main(release{}) }
