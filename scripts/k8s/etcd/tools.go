//go:build tools

// Package tools only pins etcd's server, the main package kind-image.sh builds, so that
// `go mod tidy` keeps every module it needs in go.mod and go.sum. The build tag keeps it out of
// any real build.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
