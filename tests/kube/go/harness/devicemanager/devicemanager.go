// Package devicemanager drives the kubelet's real device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) over the lines protocol, as the kubelet
// drives it: built beside a topology manager whose Store it gets, started with the kubelet's
// active pods, asked for the Node's capacity, and going through pod admission (the topology
// manager's admit handler, then UpdatePluginResources) and container start
// (GetDeviceRunContainerOptions).
//
// Its socket is the fixed /var/lib/kubelet/device-plugins/kubelet.sock: the tests run the
// program in a mount namespace of its own, where that directory is their device-plugin
// directory.
//
// Each release's program gives its Parts (the release's signatures differ); the rest is here.
//
// Operations:
//
//	start                      create a manager (its directory wiped of sockets, the checkpoint
//	                           read) and start it: {"socket": path}
//	stop                       stop it (kubelet.sock goes, plugins are disconnected)
//	capacity                   GetCapacity: {"capacity": {name: n}, "allocatable": {...}, "removed": [...]}
//	admit {pod, uid?, containers: {name: {resource: n}}}
//	                           admit a pod: {"admitted", "reason", "message", "uid",
//	                           "node_allocatable", "containers": {name: options}}; an
//	                           admitted pod becomes active
//	options {pod, containers}  a running pod's container options again (after a restart)
//	status {pod}               its containers' allocatedResourcesStatus: {container: {resource: {id: health}}}
//	delete {pod}               the pod is no longer active (its devices are freed at the next allocation)
//
// Events: "pod_update" {"pods": [uid...]}, the manager's Updates(): pods whose devices changed
// health; "allocatable" {name: n}, GetCapacity's allocatable whenever it differs from the last
// one seen (asked every few milliseconds, so that a resource that drops to 0 for a moment is
// seen doing so).
package devicemanager

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	kubedm "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/resourceupdates"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"

	"tokenresource.test/kube/harness/lines"
)

// Parts is one release's device manager with the topology manager it was built beside. The
// methods whose signatures are the same in every release come from *devicemanager.ManagerImpl
// (embedded by the adapter); the others are adapted.
type Parts interface {
	Start(logger klog.Logger, activePods kubedm.ActivePodsFunc, sourcesReady config.SourcesReady, initialContainers containermap.ContainerMap, initialContainerRunningSet sets.Set[string]) error
	Stop(logger klog.Logger) error
	UpdatePluginResources(node *schedulerframework.NodeInfo, attrs *lifecycle.PodAdmitAttributes) error
	GetDeviceRunContainerOptions(ctx context.Context, pod *v1.Pod, container *v1.Container) (*kubedm.DeviceRunContainerOptions, error)
	GetDevices(podUID, containerName string) kubedm.ResourceDeviceInstances
	Updates() <-chan resourceupdates.Update

	// GetCapacity.
	Capacity(logger klog.Logger) (v1.ResourceList, v1.ResourceList, []string)
	// The topology manager's Admit: the kubelet's "allocate resources" admit handler.
	Admit(ctx context.Context, attrs *lifecycle.PodAdmitAttributes) lifecycle.PodAdmitResult
	// UpdateAllocatedResourcesStatus.
	ResourcesStatus(logger klog.Logger, pod *v1.Pod, status *v1.PodStatus)
}

// New builds a release's Parts as the kubelet's container manager does.
type New func(logger klog.Logger) (Parts, error)

// allReady: the kubelet's pod sources have all been seen (the steady state).
type allReady struct{}

func (allReady) AddSource(string) {}
func (allReady) AllReady() bool   { return true }

type program struct {
	newParts New
	logger   klog.Logger

	mutex sync.Mutex
	parts Parts
	done  chan struct{}      // closed at stop: ends the Updates reader
	pods  map[string]*v1.Pod // the active pods by name
}

// Main runs the program until standard input closes; its exit status.
func Main(newParts New) int {
	// The manager's own log, at the verbosity that shows its plugin calls (4: "Issuing a
	// GetPreferredAllocation call"), on standard error.
	klog.InitFlags(nil)
	_ = flag.Set("v", "4")
	_ = flag.Set("logtostderr", "true")
	p := &program{newParts: newParts, logger: klog.Background(), pods: map[string]*v1.Pod{}}
	err := lines.Serve(map[string]lines.Handler{
		"start":    p.start,
		"stop":     p.stop,
		"capacity": p.capacity,
		"admit":    p.admit,
		"options":  p.options,
		"status":   p.status,
		"delete":   p.delete,
	})
	_, _ = p.stop(nil)
	klog.Flush()
	if err != nil {
		fmt.Fprintf(os.Stderr, "devicemanager: %v\n", err)
		return 1
	}
	return 0
}

func (p *program) activePods() []*v1.Pod {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	pods := make([]*v1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		pods = append(pods, pod)
	}
	return pods
}

func (p *program) current() (Parts, error) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if p.parts == nil {
		return nil, errors.New("the device manager is not started")
	}
	return p.parts, nil
}

func (p *program) start(json.RawMessage) (any, error) {
	p.mutex.Lock()
	started := p.parts != nil
	p.mutex.Unlock()
	if started {
		return nil, errors.New("the device manager is already started")
	}
	parts, err := p.newParts(p.logger)
	if err != nil {
		return nil, err
	}
	// As a restarted kubelet: no containers known from the runtime (they would only matter
	// while the sources are not all ready).
	if err := parts.Start(p.logger, p.activePods, allReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go reportUpdates(parts.Updates(), done)
	go p.reportAllocatable(parts, done)
	p.mutex.Lock()
	p.parts, p.done = parts, done
	p.mutex.Unlock()
	return map[string]string{"socket": pluginapi.KubeletSocket}, nil
}

func reportUpdates(updates <-chan resourceupdates.Update, done <-chan struct{}) {
	for {
		select {
		case update := <-updates:
			uids := append([]string(nil), update.PodUIDs...)
			sort.Strings(uids)
			lines.Event("pod_update", map[string][]string{"pods": uids})
		case <-done:
			return
		}
	}
}

// allocatableEvery: far shorter than any registration, so no drop to 0 goes unseen.
const allocatableEvery = 2 * time.Millisecond

func (p *program) reportAllocatable(parts Parts, done <-chan struct{}) {
	ticker := time.NewTicker(allocatableEvery)
	defer ticker.Stop()
	var last map[string]int64
	for {
		select {
		case <-ticker.C:
			_, allocatable, _ := parts.Capacity(p.logger)
			seen := counts(allocatable)
			if !maps.Equal(seen, last) {
				lines.Event("allocatable", seen)
				last = seen
			}
		case <-done:
			return
		}
	}
}

func (p *program) stop(json.RawMessage) (any, error) {
	p.mutex.Lock()
	parts, done := p.parts, p.done
	p.parts, p.done = nil, nil
	p.mutex.Unlock()
	if parts == nil {
		return nil, nil
	}
	close(done)
	return nil, parts.Stop(p.logger)
}

func counts(list v1.ResourceList) map[string]int64 {
	result := map[string]int64{}
	for name, quantity := range list {
		result[string(name)] = quantity.Value()
	}
	return result
}

func (p *program) capacity(json.RawMessage) (any, error) {
	parts, err := p.current()
	if err != nil {
		return nil, err
	}
	capacity, allocatable, removed := parts.Capacity(p.logger)
	sort.Strings(removed)
	return map[string]any{
		"capacity":    counts(capacity),
		"allocatable": counts(allocatable),
		"removed":     append([]string{}, removed...),
	}, nil
}

type podArgs struct {
	Pod        string                      `json:"pod"`
	UID        string                      `json:"uid"`
	Containers map[string]map[string]int64 `json:"containers"`
}

func (a podArgs) build() (*v1.Pod, error) {
	if a.Pod == "" || len(a.Containers) == 0 {
		return nil, errors.New("a pod needs a name and containers")
	}
	uid := a.UID
	if uid == "" {
		uid = "uid-" + a.Pod
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: a.Pod, Namespace: "default", UID: types.UID(uid)},
	}
	names := make([]string, 0, len(a.Containers))
	for name := range a.Containers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// Extended resources: requests equal to limits, as the API server enforces.
		limits := v1.ResourceList{}
		for resourceName, count := range a.Containers[name] {
			limits[v1.ResourceName(resourceName)] = *resource.NewQuantity(count, resource.DecimalSI)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name:      name,
			Image:     "example.com/none",
			Resources: v1.ResourceRequirements{Limits: limits, Requests: limits.DeepCopy()},
		})
	}
	return pod, nil
}

// podFor: the pod an operation's arguments describe, and the manager running now.
func (p *program) podFor(args json.RawMessage) (*v1.Pod, Parts, error) {
	var a podArgs
	if err := lines.Decode(args, &a); err != nil {
		return nil, nil, err
	}
	pod, err := a.build()
	if err != nil {
		return nil, nil, err
	}
	parts, err := p.current()
	return pod, parts, err
}

func (p *program) admit(args json.RawMessage) (any, error) {
	pod, parts, err := p.podFor(args)
	if err != nil {
		return nil, err
	}
	ctx := klog.NewContext(context.Background(), p.logger)
	attrs := &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: p.activePods(), Operation: lifecycle.AddOperation}
	result := parts.Admit(ctx, attrs)
	answer := map[string]any{"admitted": result.Admit, "reason": result.Reason, "message": result.Message, "uid": string(pod.UID)}
	if !result.Admit {
		return answer, nil
	}
	// The predicate admit handler next: the Node's allocatable, raised by the device manager
	// to cover what is already allocated (a plugin that went away must not fail the pod).
	_, allocatable, _ := parts.Capacity(p.logger)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	node.Status.Capacity, node.Status.Allocatable = allocatable, allocatable
	nodeInfo := schedulerframework.NewNodeInfo()
	nodeInfo.SetNode(node)
	if err := parts.UpdatePluginResources(nodeInfo, attrs); err != nil {
		return nil, fmt.Errorf("UpdatePluginResources: %w", err)
	}
	answer["node_allocatable"] = nodeInfo.Allocatable.ScalarResources
	p.mutex.Lock()
	p.pods[pod.Name] = pod
	p.mutex.Unlock()
	containers, err := p.runOptions(ctx, parts, pod)
	answer["containers"] = containers
	return answer, err
}

func (p *program) options(args json.RawMessage) (any, error) {
	pod, parts, err := p.podFor(args)
	if err != nil {
		return nil, err
	}
	return p.runOptions(klog.NewContext(context.Background(), p.logger), parts, pod)
}

// runOptions: what the kubelet gives the runtime for each container it starts, and the
// device IDs behind it.
func (p *program) runOptions(ctx context.Context, parts Parts, pod *v1.Pod) (map[string]any, error) {
	containers := map[string]any{}
	for i := range pod.Spec.Containers {
		container := &pod.Spec.Containers[i]
		options, err := parts.GetDeviceRunContainerOptions(ctx, pod, container)
		if err != nil {
			return containers, fmt.Errorf("GetDeviceRunContainerOptions(%s): %w", container.Name, err)
		}
		devices := map[string][]string{}
		for resourceName, instances := range parts.GetDevices(string(pod.UID), container.Name) {
			ids := make([]string, 0, len(instances))
			for id := range instances {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			devices[resourceName] = ids
		}
		entry := map[string]any{
			"device_ids": devices, "envs": map[string]string{}, "mounts": []any{},
			"devices": []any{}, "annotations": map[string]string{}, "cdi_devices": []string{},
		}
		if options != nil {
			envs := map[string]string{}
			for _, env := range options.Envs {
				envs[env.Name] = env.Value
			}
			annotations := map[string]string{}
			for _, annotation := range options.Annotations {
				annotations[annotation.Name] = annotation.Value
			}
			cdi := []string{}
			for _, device := range options.CDIDevices {
				cdi = append(cdi, device.Name)
			}
			mounts := []any{}
			for _, mount := range options.Mounts {
				mounts = append(mounts, map[string]any{"container_path": mount.ContainerPath, "host_path": mount.HostPath, "read_only": mount.ReadOnly})
			}
			hostDevices := []any{}
			for _, device := range options.Devices {
				hostDevices = append(hostDevices, map[string]string{"host_path": device.PathOnHost, "container_path": device.PathInContainer, "permissions": device.Permissions})
			}
			entry["envs"], entry["annotations"], entry["cdi_devices"] = envs, annotations, cdi
			entry["mounts"], entry["devices"] = mounts, hostDevices
		}
		containers[container.Name] = entry
	}
	return containers, nil
}

func (p *program) status(args json.RawMessage) (any, error) {
	var a struct {
		Pod string `json:"pod"`
	}
	if err := lines.Decode(args, &a); err != nil {
		return nil, err
	}
	p.mutex.Lock()
	pod, ok := p.pods[a.Pod]
	p.mutex.Unlock()
	if !ok {
		return nil, fmt.Errorf("no active pod %q", a.Pod)
	}
	parts, err := p.current()
	if err != nil {
		return nil, err
	}
	status := &v1.PodStatus{}
	for _, container := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: container.Name})
	}
	parts.ResourcesStatus(p.logger, pod, status)
	result := map[string]map[string]map[string]string{}
	for _, container := range status.ContainerStatuses {
		resources := map[string]map[string]string{}
		for _, resourceStatus := range container.AllocatedResourcesStatus {
			health := map[string]string{}
			for _, device := range resourceStatus.Resources {
				health[string(device.ResourceID)] = string(device.Health)
			}
			resources[string(resourceStatus.Name)] = health
		}
		result[container.Name] = resources
	}
	return result, nil
}

func (p *program) delete(args json.RawMessage) (any, error) {
	var a struct {
		Pod string `json:"pod"`
	}
	if err := lines.Decode(args, &a); err != nil {
		return nil, err
	}
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if _, ok := p.pods[a.Pod]; !ok {
		return nil, fmt.Errorf("no active pod %q", a.Pod)
	}
	delete(p.pods, a.Pod)
	return nil, nil
}
