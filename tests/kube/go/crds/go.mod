// The Prometheus Operator's CustomResourceDefinitions, for the tests' real API server: the
// metrics overlay's PrometheusRule (deploy/kubernetes/overlays/metrics/monitoring) is checked
// against the Operator's own schema, not just parsed. Nothing here is built: `make
// kube-programs` takes the CRD's file from the module (example/prometheus-operator-crd), as
// `make kwok` takes kwok's node stages. v0.85.0 is the newest version the module proxy serves.
module tokenresource.test/kube/crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
