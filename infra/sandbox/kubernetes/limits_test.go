package kubernetes_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"threadbox/domain/sandbox"
	k8s "threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/sandbox/sandboxtest"
)

// podPidsLimit reads the podPidsLimit of the kubelet that runs the pods
// from its live configuration (configz, through the apiserver).
func (c *cluster) podPidsLimit(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v (want the one node of the test cluster)", err)
	}
	raw, err := c.cs.CoreV1().RESTClient().Get().Resource("nodes").Name(nodes.Items[0].Name).SubResource("proxy", "configz").DoRaw(ctx)
	if err != nil {
		t.Fatalf("kubelet configz: %v", err)
	}
	var cfg struct {
		Kubelet struct {
			PodPidsLimit int64 `json:"podPidsLimit"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg.Kubelet.PodPidsLimit <= 0 {
		t.Fatalf("kubelet podPidsLimit %d: %v", cfg.Kubelet.PodPidsLimit, err)
	}
	return cfg.Kubelet.PodPidsLimit
}

// TestLimitsEnforced: the open-files limit (the agent's RLIMIT_NOFILE) binds
// every command, which cannot raise it; the processes of a pod are bounded
// by the kubelet's podPidsLimit, which the capability matrix lists when
// K8S_POD_PIDS_LIMIT declares it.
func TestLimitsEnforced(t *testing.T) {
	c := newCluster(t)
	pids := c.podPidsLimit(t)
	be := c.backend(t, "limits", func(cfg *k8s.Config) {
		cfg.Limits = sandbox.Limits{NoFile: 256}
		cfg.PodPidsLimit = pids
	})
	names, how := be.EnforcedLimits(context.Background())
	if strings.Join(names, ",") != "memory,cpu,tmp,nofile,pids" || !strings.Contains(how, "podPidsLimit "+strconv.FormatInt(pids, 10)) {
		t.Errorf("enforced limits %v (%s)", names, how)
	}
	dirs := folders(t)
	bootOn(t, be, dirs, "ctr-limits")
	sandboxtest.Cleanup(t, func() { _ = be.Remove(context.Background(), "ctr-limits") })

	if got := sh(t, be, "ctr-limits", "ulimit -n; ulimit -Hn; ulimit -n 1024 2>/dev/null && echo raised || echo refused"); got != "256\n256\nrefused" {
		t.Errorf("open files limit: %q", got)
	}
	if got := sh(t, be, "ctr-limits", "python3 -c 'import os\nn=0\ntry:\n  while True: os.open(\"/dev/null\", os.O_RDONLY); n+=1\nexcept OSError as e: print(e.errno == 24, n < 256)'"); got != "True True" {
		t.Errorf("opening files past the limit: %q", got)
	}
	// More processes than the pod may have: the fork past the limit
	// fails (EAGAIN) before the pod has podPidsLimit of them.
	script := "python3 -c '" + `
import os, signal, time
kids, err = [], 0
try:
    for i in range(` + strconv.FormatInt(pids+50, 10) + `):
        pid = os.fork()
        if pid == 0:
            time.sleep(300)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    err = e.errno
print(len(kids), err)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
'`
	got := strings.Fields(sh(t, be, "ctr-limits", script))
	if len(got) != 2 {
		t.Fatalf("fork loop printed %q", got)
	}
	n, _ := strconv.ParseInt(got[0], 10, 64)
	if got[1] != "11" || n >= pids || n < pids/2 {
		t.Errorf("forked %d processes (errno %s), want fewer than the podPidsLimit %d and then EAGAIN", n, got[1], pids)
	}
}
