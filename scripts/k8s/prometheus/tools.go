//go:build tools

// Package tools only pins the commands prometheus.sh compiles, so that `go mod tidy` keeps
// every module they need in go.mod and go.sum. The build tag keeps it out of any real build
// (main packages cannot be imported).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
