# The real Kubernetes components the tests in tests/kube drive, built from the Go module
# proxy: for each release a Go module of ours (tests/kube/go/v<release>) that imports
# k8s.io/kubernetes as a library. Included from the Makefile.
#
#   make kube-programs   -> $(KUBE_BIN)/v<release>/<program>, and the release's kubelet for
#                           tests/node (one go build: the kubelet shares most of its packages
#                           with the programs), once: Go's module and build
#                           caches make a second run a few seconds of checking. Each
#                           program says the k8s.io/kubernetes version it was built from
#                           (`kubectl version`, the API server's /version).
#                           And helm (`make helm-program` alone: tests/kube/go/helm, a module
#                           of its own, helm's k8s.io pins out of the release modules)
#                           -> $(KUBE_BIN)/helm/helm;
#                           the Prometheus Operator's PrometheusRule CRD (tests/kube/go/crds)
#                           -> $(KUBE_BIN)/crds/.
#   make kube-test       -> tests/kube against them (and the Helm chart's tests)
#   make chart           -> dist/token-resource-<version>.tgz, versioned by pyproject.toml
#
# Needs Go 1.26 or newer (the k8s.io/kubernetes modules' own floor) and Debian's etcd-server.

KUBE_RELEASES := 1.36 1.37
KUBE_BIN ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/token-resource/kube
KUBE_TEST_ARGS ?=

HELM := $(KUBE_BIN)/helm/helm
# pyproject.toml's version, as packaging/deb.mk reads it.
CHART_VERSION = $(PYPROJECT_VERSION)

.PHONY: helm-program kube-programs kube-test chart

# helm alone: all `make chart` needs (a minute, not the Kubernetes programs' build).
helm-program:
	@command -v go >/dev/null || { echo "helm-program: Go 1.26 or newer is needed on PATH" >&2; exit 1; }
	echo "helm-program: helm"
	cd tests/kube/go/helm && \
	version=$$(go list -m -f '{{.Version}}' helm.sh/helm/v4) && \
	go build -trimpath -buildvcs=false \
		-ldflags "-X helm.sh/helm/v4/internal/version.version=$$version" \
		-o $(HELM) helm.sh/helm/v4/cmd/helm

kube-programs: helm-program
	@command -v go >/dev/null || { echo "kube-programs: Go 1.26 or newer is needed on PATH" >&2; exit 1; }
	for release in $(KUBE_RELEASES); do \
		echo "kube-programs: Kubernetes $$release"; \
		(cd tests/kube/go/v$$release && \
		 version=$$(go list -m -f '{{.Version}}' k8s.io/kubernetes) && \
		 go build -trimpath -buildvcs=false \
			-ldflags "-X k8s.io/component-base/version.gitVersion=$$version" \
			-o $(KUBE_BIN)/v$$release/ ./... k8s.io/kubernetes/cmd/kubelet) || exit 1; \
	done
	echo "kube-programs: the Prometheus Operator's PrometheusRule CRD"
	cd tests/kube/go/crds && \
	go mod download github.com/prometheus-operator/prometheus-operator && \
	crds=$$(go list -m -f '{{.Dir}}' github.com/prometheus-operator/prometheus-operator) && \
	install -D -m 644 $$crds/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml \
		$(KUBE_BIN)/crds/monitoring.coreos.com_prometheusrules.yaml

kube-test: kube-programs $(NEWEST)/.installed
	$(call run_pytest,$(NEWEST)/bin/python,TOKEN_RESOURCE_KUBE_BIN=$(KUBE_BIN),-p no:cacheprovider tests/kube $(KUBE_TEST_ARGS))

# The chart with pyproject.toml's version (Chart.yaml says the same: tests/kube/test_chart.py).
chart: helm-program
	mkdir -p dist
	$(HELM) lint --strict deploy/helm/token-resource
	@[ -n "$(CHART_VERSION)" ] || { echo "chart: no version from pyproject.toml" >&2; exit 1; }
	$(HELM) package deploy/helm/token-resource --version $(CHART_VERSION) \
		--app-version $(CHART_VERSION) -d dist

# kwok for the fleet-scale benchmark (bench/scale.py), from its own module (tests/kube/go/kwok),
# and the module's own node stages beside it (kustomize/stage/node: Ready at once, then a Lease
# renewed as a kubelet's), which kwok needs to keep a Node alive.
KWOK_DIR := $(KUBE_BIN)/kwok
.PHONY: kwok
kwok:
	@command -v go >/dev/null || { echo "kwok: Go 1.26 or newer is needed on PATH" >&2; exit 1; }
	cd tests/kube/go/kwok && \
	go build -trimpath -buildvcs=false -o $(KWOK_DIR)/kwok sigs.k8s.io/kwok/cmd/kwok && \
	stages=$$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/node && \
	mkdir -p $(KWOK_DIR)/stages && \
	install -m 644 $$stages/fast/node-initialize.yaml \
		$$stages/heartbeat-with-lease/node-heartbeat-with-lease.yaml $(KWOK_DIR)/stages/
