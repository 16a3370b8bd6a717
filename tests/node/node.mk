# A real Kubernetes node for tests/node: the kubelet of each release (its own main package,
# k8s.io/kubernetes/cmd/kubelet, built in the release's module of tests/kube/go), containerd 2.x
# (tests/node/go/containerd) and the images the node runs, beside the control plane of
# tests/kube. Included from the Makefile.
#
#   make node-containerd -> $(NODE_BIN)/{containerd,ctr,containerd-shim-runc-v2} and
#                           $(NODE_BIN)/images/*.oci.tar (tests/node/images.py)
#   make node-programs   -> the above, and $(KUBE_BIN)/v<release>/kubelet (built by
#                           kube-programs); Go's caches make a second run a few seconds of checking
#   make node-test       -> tests/node (root; one node on the machine at a time), with the
#                           agent's image and packages as make image and make deb build them
#
# Needs root, Go 1.26 or newer, gcc (the pause image), and Debian's runc, containernetworking-
# plugins and etcd-server (.ci/run installs them).

NODE_BIN := $(KUBE_BIN)/node
CONTAINERD_MODULE := github.com/containerd/containerd/v2
# containerd's own release build: no btrfs (Debian 12 has no btrfs headers by default) and no
# generated CLI docs; the shim static and without gRPC, as upstream builds it.
CONTAINERD_TAGS := urfave_cli_no_docs no_btrfs
NODE_TEST_ARGS ?=

.PHONY: node-containerd node-programs node-test

# containerd and the images: no Kubernetes module, so make test starts it at once.
node-containerd: $(NEWEST)/.installed
	@command -v go >/dev/null || { echo "node-containerd: Go 1.26 or newer is needed on PATH" >&2; exit 1; }
	echo "node-containerd: containerd"
	cd tests/node/go/containerd && \
	version=$$(go list -m -f '{{.Version}}' $(CONTAINERD_MODULE)) && \
	stamp="-X $(CONTAINERD_MODULE)/version.Version=$$version" && \
	go build -trimpath -buildvcs=false -tags "$(CONTAINERD_TAGS)" -ldflags "$$stamp" \
		-o $(NODE_BIN)/ $(CONTAINERD_MODULE)/cmd/containerd $(CONTAINERD_MODULE)/cmd/ctr && \
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -tags "$(CONTAINERD_TAGS) no_grpc" \
		-ldflags "$$stamp" -o $(NODE_BIN)/ $(CONTAINERD_MODULE)/cmd/containerd-shim-runc-v2
	$(NEWEST)/bin/python -m tests.node.images $(NODE_BIN)/images

# The kubelets are kube-programs' (one go build with each release's programs).
node-programs: kube-programs node-containerd

node-test: node-programs deb upgrade-deb image $(NEWEST)/.installed
	$(call run_pytest,$(NEWEST)/bin/python,TOKEN_RESOURCE_KUBE_BIN=$(KUBE_BIN) $(PACKAGES_UNDER_TEST),-p no:cacheprovider tests/node $(NODE_TEST_ARGS))
