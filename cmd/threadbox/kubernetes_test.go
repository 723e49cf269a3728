package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	k8s "threadbox/infra/sandbox/kubernetes"
)

// needKubernetes returns the test cluster's kubeconfig
// (THREADBOX_K8S_KUBECONFIG, set by scripts/test.sh after
// scripts/k8s-up.sh) and a namespace of the test's own, deleted with its
// pods, claims and volumes when the test ends (after the server stopped).
func needKubernetes(t *testing.T) (kubeconfig, ns string, cs kubernetes.Interface) {
	t.Helper()
	kubeconfig = os.Getenv("THREADBOX_K8S_KUBECONFIG")
	if kubeconfig == "" {
		missing(t, "no test cluster: THREADBOX_K8S_KUBECONFIG is unset (scripts/k8s-up.sh)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		missing(t, "test cluster kubeconfig: %v", err)
	}
	cs, err = kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns = fmt.Sprintf("tb-e2e-%d", time.Now().UnixNano()%1e12)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		missing(t, "test cluster at %s: %v", rc.Host, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		zero := int64(0)
		_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"}); err == nil {
			for _, pv := range pvs.Items {
				if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
					_ = cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
				}
			}
		}
		_ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		for ctx.Err() == nil {
			if pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil && len(pods.Items) == 0 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("pods of %s left after the test", ns)
	})
	for ctx.Err() == nil {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return kubeconfig, ns, cs
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no default service account in %s", ns)
	return
}

// TestKubernetesEndToEnd: with SANDBOX_BACKEND=kubernetes a chat turn and a
// Messages API request run their code in pods of the test cluster: the
// turn reads an upload and writes an output file that downloads, the
// Messages API's code execution answers, and the capability matrix lists
// the backend as available.
func TestKubernetesEndToEnd(t *testing.T) {
	kubeconfig, ns, cs := needKubernetes(t)
	oom := k8s.DefaultOOMEvents
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.oom_control"); err == nil {
		oom = "/sys/fs/cgroup/memory/memory.oom_control"
	}
	s := startServer(t, "", map[string]string{
		"SANDBOX_BACKEND": "kubernetes", "KUBECONFIG": kubeconfig, "K8S_NAMESPACE": ns,
		"K8S_HOST_PATH_VOLUMES": "true", "K8S_IMAGE_PULL_POLICY": "Never", "K8S_OOM_EVENTS": oom,
		"MODEL_PROVIDER": "runner",
	})
	f := newWSFixture(t, s)

	r := s.do("GET", "/api/gpt/v1/sandbox/backends", f.admin, nil)
	if body := string(r.body); r.status != 200 || !strings.Contains(body, `"name":"kubernetes"`) || !strings.Contains(body, `"available":true`) ||
		!strings.Contains(body, "runtime class") {
		t.Fatalf("capability matrix: %d %s", r.status, r.body)
	}

	if r := f.upload(t, f.admin, f.tid, "", "in.txt", "from-upload"); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r = s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
		"content": "```bash\ncat /mnt/user-data/uploads/in.txt; echo; echo made-in-a-pod > /mnt/user-data/outputs/k8s.txt\n```",
		"pgpt":    map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 || !strings.Contains(string(r.body), "from-upload") {
		t.Fatalf("chat turn: %d %s", r.status, r.body)
	}
	if d := f.download(f.admin, f.tid, "/mnt/user-data/outputs/k8s.txt"); d.status != 200 || string(d.body) != "made-in-a-pod\n" {
		t.Fatalf("download of the pod's output: %d %q", d.status, d.body)
	}
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the turn's sandbox: %v %v", pods, err)
	}

	cl := msgClient(s, f.admin)
	msg, err := cl.Messages.New(context.Background(), msgParams("", userText("```bash\necho from-k8s; cat /proc/1/cmdline | tr '\\0' ' '\n```"), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for i, b := range msg.Content {
		if b.Type == "server_tool_use" {
			_, res := bashResult(t, msg.Content, i)
			outs = append(outs, res.Stdout)
		}
	}
	if len(outs) != 1 || !strings.HasPrefix(outs[0], "from-k8s\n"+k8s.AgentPath) {
		t.Fatalf("Messages API code execution: %q", outs)
	}
	if pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"}); err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods after the Messages API request: %d %v", len(pods.Items), err)
	}
	s.stop()
}
