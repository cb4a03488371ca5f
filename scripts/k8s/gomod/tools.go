//go:build tools

// Package tools only pins the Kubernetes commands that build.sh compiles, so
// that `go mod tidy` keeps every module they need in go.mod and go.sum. The
// build tag keeps it out of any real build (main packages cannot be imported).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
