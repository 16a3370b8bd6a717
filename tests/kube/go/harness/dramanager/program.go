// Package dramanager is the kubelet's real plugin manager (pkg/kubelet/pluginmanager) with its
// real DRA manager (pkg/kubelet/cm/dra) registered for "DRAPlugin", as kubelet.go and
// cm/container_manager_linux.go wire them, driven over the lines protocol. Each release's
// dramanager program passes a Release with what differs between the releases' APIs.
package dramanager

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"

	"tokenresource.test/kube/harness/lines"
)

// Release is what differs between the releases' kubelet APIs.
type Release interface {
	// Handler wraps the DRA manager's registration handler, reporting its calls to record.
	Handler(inner cache.PluginHandler, record *Registrations) cache.PluginHandler
	// Stop waits for the manager's background work to end where the release can (1.37's
	// Manager.Stop); the context it was started with is already canceled.
	Stop(manager *dra.Manager)
	// UpdateAllocatedResourcesStatus fills status as the kubelet does before it writes it.
	UpdateAllocatedResourcesStatus(ctx context.Context, manager *dra.Manager, pod *v1.Pod, status *v1.PodStatus)
}

type instance struct {
	manager *dra.Manager
	cancel  context.CancelFunc
	stopCh  chan struct{}
	done    chan struct{}
}

type program struct {
	release       Release
	client        kubernetes.Interface
	registryDir   string
	stateDir      string
	node          string
	registrations *Registrations
	logger        klog.Logger

	mutex sync.Mutex
	// The pods the program prepared and did not unprepare: the kubelet's active pods, which
	// its DRA manager's reconcile loop compares with the claims it holds.
	pods    map[types.UID]*v1.Pod
	running *instance
}

// Main runs the program: flags, the managers, then the operations until standard input closes.
func Main(release Release) {
	registryDir := flag.String("plugins-registry", "", "the plugin watcher's directory (the kubelet's plugins_registry)")
	stateDir := flag.String("state-dir", "", "the DRA manager's checkpoint directory (the kubelet's root directory)")
	kubeconfig := flag.String("kubeconfig", "", "the kubelet's kubeconfig: the node's identity")
	node := flag.String("node", "", "the node's name")
	flag.Parse()
	if *registryDir == "" || *stateDir == "" || *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "usage: dramanager --plugins-registry DIR --state-dir DIR --kubeconfig FILE --node NAME")
		os.Exit(2)
	}
	logger := newLogger()
	// The managers' non-contextual klog calls come here too, at the same depth.
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", fmt.Sprint(verbosity))
	klog.SetLogger(logger)

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		fail(err)
	}
	p := &program{
		release:       release,
		client:        client,
		registryDir:   *registryDir,
		stateDir:      *stateDir,
		node:          *node,
		registrations: newRegistrations(),
		logger:        logger,
		pods:          map[types.UID]*v1.Pod{},
	}
	if err := p.start(); err != nil {
		fail(err)
	}
	lines.Event("started", nil)
	err = lines.Serve(map[string]lines.Handler{
		"prepare":    p.prepare,
		"resources":  p.resources,
		"unprepare":  p.unprepare,
		"health":     p.health,
		"registered": func(json.RawMessage) (any, error) { return p.registrations.list(), nil },
		"restart":    p.restart,
	})
	p.stop()
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "dramanager: %v\n", err)
	os.Exit(1)
}

// start makes a DRA manager and a plugin manager, as the kubelet's start does.
func (p *program) start() error {
	manager, err := dra.NewManager(p.logger, p.client, p.stateDir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), p.logger))
	// Every source is ready at once: the program's pods are all the kubelet's.
	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := manager.Start(ctx, p.activePods, p.getNode, sourcesReady); err != nil {
		cancel()
		return err
	}
	plugins := pluginmanager.NewPluginManager(p.registryDir, &record.FakeRecorder{})
	plugins.AddHandler(pluginwatcherapi.DRAPlugin, p.release.Handler(manager.GetWatcherHandler(), p.registrations))
	run := &instance{manager: manager, cancel: cancel, stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(run.done)
		plugins.Run(ctx, sourcesReady, run.stopCh)
	}()
	// What the kubelet's pod status manager would hear: pods whose devices' health changed.
	go func() {
		for {
			select {
			case update := <-manager.Updates():
				lines.Event("health-update", map[string]any{"pods": update.PodUIDs})
			case <-ctx.Done():
				return
			}
		}
	}()
	p.mutex.Lock()
	p.running = run
	p.mutex.Unlock()
	return nil
}

func (p *program) stop() {
	p.mutex.Lock()
	run := p.running
	p.running = nil
	p.mutex.Unlock()
	if run == nil {
		return
	}
	close(run.stopCh)
	run.cancel()
	p.release.Stop(run.manager)
	select {
	case <-run.done:
	case <-time.After(10 * time.Second):
		p.logger.Error(nil, "The plugin manager did not stop within 10 s")
	}
	p.registrations.reset()
}

func (p *program) restart(json.RawMessage) (any, error) {
	p.stop()
	return nil, p.start()
}

func (p *program) manager() (*dra.Manager, error) {
	p.mutex.Lock()
	defer p.mutex.Unlock()
	if p.running == nil {
		return nil, errors.New("not running")
	}
	return p.running.manager, nil
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

func (p *program) getNode(ctx context.Context) (*v1.Node, error) {
	return p.client.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
}

type podArgs struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Container string `json:"container"`
}

func (a podArgs) matches(pod *v1.Pod) bool {
	return pod.Namespace == a.Namespace && pod.Name == a.Name
}

// pod reads the pod from the API server, as the kubelet sees it; a pod the program prepared and
// that is gone from the API server is the copy it kept (a kubelet unprepares deleted pods).
func (p *program) pod(ctx context.Context, raw json.RawMessage) (*v1.Pod, podArgs, error) {
	var args podArgs
	if err := lines.Decode(raw, &args); err != nil {
		return nil, args, err
	}
	if args.Namespace == "" {
		args.Namespace = "default"
	}
	pod, err := p.client.CoreV1().Pods(args.Namespace).Get(ctx, args.Name, metav1.GetOptions{})
	if err == nil {
		return pod, args, nil
	}
	p.mutex.Lock()
	defer p.mutex.Unlock()
	for _, known := range p.pods {
		if args.matches(known) {
			return known, args, nil
		}
	}
	return nil, args, err
}

// managerAndPod: the manager running now, and the pod an operation's arguments name.
func (p *program) managerAndPod(ctx context.Context, raw json.RawMessage) (*dra.Manager, *v1.Pod, error) {
	manager, err := p.manager()
	if err != nil {
		return nil, nil, err
	}
	pod, _, err := p.pod(ctx, raw)
	return manager, pod, err
}

func (p *program) prepare(raw json.RawMessage) (any, error) {
	ctx := klog.NewContext(context.Background(), p.logger)
	manager, pod, err := p.managerAndPod(ctx, raw)
	if err != nil {
		return nil, err
	}
	if err := manager.PrepareResources(ctx, pod); err != nil {
		return nil, err
	}
	p.mutex.Lock()
	p.pods[pod.UID] = pod
	p.mutex.Unlock()
	return map[string]string{"uid": string(pod.UID)}, nil
}

func container(pod *v1.Pod, args podArgs) (*v1.Container, error) {
	for i := range pod.Spec.Containers {
		if args.Container == "" || pod.Spec.Containers[i].Name == args.Container {
			return &pod.Spec.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s has no container %q", pod.Namespace, pod.Name, args.Container)
}

// resources: GetResources, what the kubelet passes the runtime for a container (CDI device IDs).
func (p *program) resources(raw json.RawMessage) (any, error) {
	manager, err := p.manager()
	if err != nil {
		return nil, err
	}
	pod, args, err := p.pod(context.Background(), raw)
	if err != nil {
		return nil, err
	}
	c, err := container(pod, args)
	if err != nil {
		return nil, err
	}
	info, err := manager.GetResources(pod, c)
	if err != nil {
		return nil, err
	}
	ids := []string{}
	for _, device := range info.CDIDevices {
		ids = append(ids, device.Name)
	}
	return map[string]any{"cdi_devices": ids}, nil
}

func (p *program) unprepare(raw json.RawMessage) (any, error) {
	ctx := klog.NewContext(context.Background(), p.logger)
	manager, pod, err := p.managerAndPod(ctx, raw)
	if err != nil {
		return nil, err
	}
	if err := manager.UnprepareResources(ctx, pod); err != nil {
		return nil, err
	}
	p.mutex.Lock()
	delete(p.pods, pod.UID)
	p.mutex.Unlock()
	return nil, nil
}

// health: the containers' allocatedResourcesStatus as the kubelet would write it now.
func (p *program) health(raw json.RawMessage) (any, error) {
	ctx := klog.NewContext(context.Background(), p.logger)
	manager, err := p.manager()
	if err != nil {
		return nil, err
	}
	pod, _, err := p.pod(ctx, raw)
	if err != nil {
		return nil, err
	}
	status := &v1.PodStatus{}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	p.release.UpdateAllocatedResourcesStatus(ctx, manager, pod, status)
	result := map[string][]v1.ResourceStatus{}
	for _, s := range status.ContainerStatuses {
		result[s.Name] = s.AllocatedResourcesStatus
	}
	return result, nil
}
