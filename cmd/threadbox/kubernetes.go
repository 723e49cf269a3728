package main

import (
	"log/slog"
	"strconv"
	"strings"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/kubernetes"
)

// kubeSettings are the kubernetes backend's settings (docs/backends.md).
type kubeSettings struct {
	Kubeconfig      string // KUBECONFIG; empty means in-cluster credentials
	Namespace       string // K8S_NAMESPACE
	RuntimeClass    string // K8S_RUNTIME_CLASS ("gvisor" in production)
	StorageClass    string // K8S_STORAGE_CLASS; empty is the cluster's default
	AgentImage      string // K8S_AGENT_IMAGE
	PullPolicy      string // K8S_IMAGE_PULL_POLICY
	HostPathVolumes bool   // K8S_HOST_PATH_VOLUMES=true: claims bound to the host folders
	OOMEvents       string // K8S_OOM_EVENTS: the agent's OOM counter file in the pod
	PodPidsLimit    int64  // K8S_POD_PIDS_LIMIT: the nodes' kubelet podPidsLimit, as the operator set it
	NetworkPolicy   string // K8S_NETWORK_POLICY: "enforced" or "unenforced", as the operator declares; unset refuses to boot
}

// loadKubeSettings reads the K8S_* settings.
func loadKubeSettings(env func(name, def string) string) kubeSettings {
	return kubeSettings{
		Kubeconfig:      env("KUBECONFIG", ""),
		Namespace:       env("K8S_NAMESPACE", kubernetes.DefaultNamespace),
		RuntimeClass:    env("K8S_RUNTIME_CLASS", ""),
		StorageClass:    env("K8S_STORAGE_CLASS", ""),
		AgentImage:      env("K8S_AGENT_IMAGE", kubernetes.DefaultAgentImage),
		PullPolicy:      env("K8S_IMAGE_PULL_POLICY", ""),
		HostPathVolumes: strings.EqualFold(env("K8S_HOST_PATH_VOLUMES", "false"), "true"),
		OOMEvents:       env("K8S_OOM_EVENTS", ""),
		PodPidsLimit:    podPids(env("K8S_POD_PIDS_LIMIT", "0")),
		NetworkPolicy:   env("K8S_NETWORK_POLICY", ""),
	}
}

// newKubernetes builds the kubernetes backend from the configuration.
func newKubernetes(cfg Config, limits sandbox.Limits, log *slog.Logger) (*kubernetes.Backend, error) {
	k := cfg.Kubernetes
	var pull kubernetes.PullPolicy
	if k.PullPolicy != "" {
		pull = kubernetes.PullPolicy(k.PullPolicy)
	}
	return kubernetes.New(kubernetes.Config{
		Settings:        boxes.Settings{Instance: cfg.Instance, Limits: limits, Logger: log, TrustDir: egressTrustDir(cfg)},
		Kubeconfig:      k.Kubeconfig,
		Namespace:       k.Namespace,
		Image:           cfg.SandboxImage,
		AgentImage:      k.AgentImage,
		PullPolicy:      pull,
		RuntimeClass:    k.RuntimeClass,
		StorageClass:    k.StorageClass,
		HostPathVolumes: k.HostPathVolumes,
		OOMEvents:       k.OOMEvents,
		PodPidsLimit:    k.PodPidsLimit,
		NetworkPolicy:   kubernetes.NetworkPolicy(k.NetworkPolicy),
	})
}

// podPids reads K8S_POD_PIDS_LIMIT; anything but a positive number is 0
// (unknown).
func podPids(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
