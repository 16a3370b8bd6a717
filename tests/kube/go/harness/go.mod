// What the programs of every release share: no Kubernetes code, so each release's module
// builds it against its own.
module tokenresource.test/kube/harness

go 1.26.0
