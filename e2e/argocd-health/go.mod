// An Argo CD health check run as Argo CD runs it, for the e2e tests. Built by
// e2e/scripts/build-k8s.sh into the binaries cache; not tether code.
module tether.dev/e2e/argocd-health

go 1.26.0

require github.com/yuin/gopher-lua v1.1.1
