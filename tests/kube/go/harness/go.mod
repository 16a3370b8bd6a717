// What the programs of every release share. Its packages that use Kubernetes code are
// compiled inside each release's module, whose replace lines pin that code to the release.
module tokenresource.test/kube/harness

go 1.26.0
