package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"threadbox/infra/sandbox/boxes"
	k8s "threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/sandbox/sandboxtest"
)

// cluster is the test cluster of scripts/k8s-up.sh, which scripts/test.sh
// names in THREADBOX_K8S_KUBECONFIG; a test namespace of its own is made
// for each test and deleted with everything in it when the test ends.
type cluster struct {
	kubeconfig string
	cs         kubernetes.Interface
	ns         string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("short")
	}
	path := os.Getenv("THREADBOX_K8S_KUBECONFIG")
	if path == "" {
		sandboxtest.Need(t, "no test cluster: THREADBOX_K8S_KUBECONFIG is unset (scripts/k8s-up.sh prints it; scripts/test.sh sets it)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		sandboxtest.Need(t, "test cluster kubeconfig %s: %v", path, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		sandboxtest.Need(t, "test cluster at %s does not answer: %v", rc.Host, err)
	}
	c := &cluster{kubeconfig: path, cs: cs, ns: fmt.Sprintf("tb-test-%d", time.Now().UnixNano()%1e12)}
	// As docs/kubernetes/role.yaml makes it: the restricted Pod Security
	// Standard, which every sandbox pod must meet.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns, Labels: k8s.SandboxNamespaceLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Cleanup(t, func() { c.cleanup(t) })
	// The namespace's default service account (pods need it) comes from
	// the controller-manager a moment later.
	for {
		if _, err := cs.CoreV1().ServiceAccounts(c.ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no default service account in %s", c.ns)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// cleanup deletes the test namespace, waits for its pods to be gone and
// deletes the volumes its sandboxes left.
func (c *cluster) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pvs, err := c.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"})
	if err == nil {
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == c.ns {
				_ = c.cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
			}
		}
	}
	zero := int64(0)
	_ = c.cs.CoreV1().Pods(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err := c.cs.CoreV1().Namespaces().Delete(ctx, c.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", c.ns, err)
	}
	for ctx.Err() == nil {
		if pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{}); err == nil && len(pods.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("pods of %s still there after the test", c.ns)
}

// oomEvents is the agent's OOM counter file on this host's cgroup version.
func oomEvents() string {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.oom_control"); err == nil {
		return "/sys/fs/cgroup/memory/memory.oom_control"
	}
	return k8s.DefaultOOMEvents
}

// backend returns a backend on the test cluster with instance; the suite's
// host folders become its claims' volumes (HostPathVolumes).
func (c *cluster) backend(t *testing.T, instance string, mod ...func(*k8s.Config)) *k8s.Backend {
	t.Helper()
	cfg := k8s.Config{
		Settings:        boxes.Settings{Instance: instance, Logger: sandboxtest.Logger(t)},
		Kubeconfig:      c.kubeconfig,
		Namespace:       c.ns,
		HostPathVolumes: true,
		PullPolicy:      corev1.PullNever,
		OOMEvents:       oomEvents(),
		// The test cluster has no policy engine (its pods have no network
		// but loopback): said as the operator of such a cluster would.
		NetworkPolicy: k8s.NetworkPolicyUnenforced,
	}
	for _, m := range mod {
		m(&cfg)
	}
	be, err := k8s.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := be.Available(ctx); err != nil {
		t.Fatalf("backend not available: %v", err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

func k8sClient(t *testing.T, rc *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
