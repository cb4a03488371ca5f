//go:build ignore

// kind-render: what kind does with a cluster config before any container exists, so that
// scripts/check-kind.sh can check examples/kind/cluster.yaml on a machine where kind cannot
// run (no Docker daemon, no node image). It loads the config with kind's own strict decoder
// and defaults, runs kind's validation, then for every node renders the kubeadm config
// (InitConfiguration/JoinConfiguration, KubeletConfiguration, ...) from kind's template and
// applies the cluster's and the node's kubeadmConfigPatches, exactly as the "Writing
// configuration" step of `kind create cluster` does (pkg/cluster/internal/create/actions/
// config). A patch that does not apply, or a field kind does not know, fails here as it would
// there.
//
// It uses kind's internal packages, so scripts/check-kind.sh builds it from inside a copy of
// the kind module (at pkg/cluster/wsloadrender/); the build tag keeps every other Go tool off
// this file.
//
// usage: kind-render cluster CONFIG KUBERNETES_VERSION
//
//	prints {"name", "nodes": [{"role", "image", "labels", "kubeadm": [documents...]}]}
//
// usage: kind-render yaml2json FILE
//
//	prints the file's YAML documents as one JSON array, decoded as Kubernetes tools decode
//	them (sigs.k8s.io/yaml), so the checks need no YAML library of their own
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster/constants"
	"sigs.k8s.io/kind/pkg/cluster/internal/kubeadm"
	"sigs.k8s.io/kind/pkg/internal/apis/config"
	"sigs.k8s.io/kind/pkg/internal/apis/config/encoding"
	"sigs.k8s.io/kind/pkg/internal/patch"
	"sigs.k8s.io/yaml"
)

type node struct {
	Role    string            `json:"role"`
	Image   string            `json:"image"`
	Labels  map[string]string `json:"labels"`
	Kubeadm []interface{}     `json:"kubeadm"`
}

func main() {
	var err error
	switch {
	case len(os.Args) == 4 && os.Args[1] == "cluster":
		err = cluster(os.Args[2], os.Args[3])
	case len(os.Args) == 3 && os.Args[1] == "yaml2json":
		err = yaml2json(os.Args[2])
	default:
		fmt.Fprintln(os.Stderr, "usage: kind-render cluster CONFIG KUBERNETES_VERSION | yaml2json FILE")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kind-render: %s: %v\n", os.Args[2], err)
		os.Exit(1)
	}
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func yaml2json(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := []interface{}{}
	for i, doc := range separator.Split(string(raw), -1) {
		var v interface{}
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
			return fmt.Errorf("document %d: %w", i+1, err)
		}
		if v != nil {
			docs = append(docs, v)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(docs)
}

func cluster(path, kubeVersion string) error {
	cfg, err := encoding.Load(path)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	out := struct {
		Name  string `json:"name"`
		Nodes []node `json:"nodes"`
	}{Name: cfg.Name}
	for i, n := range cfg.Nodes {
		// The values kind takes from the provider and the running node; they only fill in
		// addresses and names, which nothing checked here depends on.
		data := kubeadm.ConfigData{
			NodeProvider:         "docker",
			ClusterName:          cfg.Name,
			KubernetesVersion:    kubeVersion,
			ControlPlaneEndpoint: cfg.Name + "-control-plane:6443",
			APIBindPort:          6443,
			APIServerAddress:     cfg.Networking.APIServerAddress,
			Token:                kubeadm.Token,
			PodSubnet:            cfg.Networking.PodSubnet,
			KubeProxyMode:        string(cfg.Networking.KubeProxyMode),
			ServiceSubnet:        cfg.Networking.ServiceSubnet,
			ControlPlane:         string(n.Role) == constants.ControlPlaneNodeRoleValue,
			IPFamily:             cfg.Networking.IPFamily,
			FeatureGates:         cfg.FeatureGates,
			RuntimeConfig:        cfg.RuntimeConfig,
			NodeName:             fmt.Sprintf("%s-node%d", cfg.Name, i),
			NodeAddress:          fmt.Sprintf("172.18.0.%d", i+2),
		}
		if cfg.Networking.IPFamily != config.IPv4Family {
			return fmt.Errorf("only an IPv4 cluster is rendered here, not %s", cfg.Networking.IPFamily)
		}
		if len(n.Labels) > 0 {
			var labels []string
			for k, v := range n.Labels {
				labels = append(labels, k+"="+v)
			}
			data.NodeLabels = strings.Join(labels, ",")
		}
		rendered, err := kubeadm.Config(data)
		if err != nil {
			return fmt.Errorf("node %d: kubeadm config: %w", i, err)
		}
		rendered, err = patch.KubeYAML(rendered, cfg.KubeadmConfigPatches, cfg.KubeadmConfigPatchesJSON6902)
		if err != nil {
			return fmt.Errorf("cluster kubeadmConfigPatches: %w", err)
		}
		if len(n.KubeadmConfigPatches) > 0 || len(n.KubeadmConfigPatchesJSON6902) > 0 {
			rendered, err = patch.KubeYAML(rendered, n.KubeadmConfigPatches, n.KubeadmConfigPatchesJSON6902)
			if err != nil {
				return fmt.Errorf("node %d kubeadmConfigPatches: %w", i, err)
			}
		}
		docs := []interface{}{}
		for _, doc := range separator.Split(rendered, -1) {
			var v interface{}
			if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
				return fmt.Errorf("node %d: rendered kubeadm config does not parse: %w", i, err)
			}
			if v != nil {
				docs = append(docs, v)
			}
		}
		out.Nodes = append(out.Nodes, node{Role: string(n.Role), Image: n.Image, Labels: n.Labels, Kubeadm: docs})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
