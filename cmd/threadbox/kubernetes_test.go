package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"threadbox/domain/sandbox"
	k8s "threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/sandbox/kubernetes/k8stest"
	"threadbox/infra/sandbox/sandboxtest"
)

// needKubernetes returns the test cluster's kubeconfig
// (THREADBOX_K8S_KUBECONFIG, set by scripts/test.sh after
// scripts/k8s-up.sh) and a namespace of the test's own, deleted with its
// pods, claims and volumes when the test ends (after the server stopped).
// Only a test named TestKubernetes… may use the cluster: scripts/test.sh
// runs the package's other tests before the cluster is up, and these after.
func needKubernetes(t *testing.T) (kubeconfig, ns string, cs kubernetes.Interface) {
	t.Helper()
	if !strings.HasPrefix(t.Name(), "TestKubernetes") {
		t.Fatalf("%s uses the test cluster but is not named TestKubernetes…: scripts/test.sh would run it before the cluster is up", t.Name())
	}
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
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: k8s.SandboxNamespaceLabels}}, metav1.CreateOptions{}); err != nil {
		missing(t, "test cluster at %s: %v", rc.Host, err)
	}
	sandboxtest.Cleanup(t, func() {
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
		"SANDBOX_BACKEND": "kubernetes", "KUBECONFIG": kubeconfig, "K8S_NAMESPACE": ns, "K8S_NETWORK_POLICY": "unenforced",
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
	if len(outs) != 1 || !strings.HasPrefix(outs[0], "from-k8s\n"+sandbox.AgentPath) {
		t.Fatalf("Messages API code execution: %q", outs)
	}
	if pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"}); err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods after the Messages API request: %d %v", len(pods.Items), err)
	}
	s.stop()
}

// TestKubernetesStorageClassFiles: with K8S_HOST_PATH_VOLUMES=false the
// claims come from a storage class (the test's own provisioner,
// k8stest.Provisioner) and threadbox never sees their volumes: an upload
// through the thread API, a skill, and what code writes to outputs all go
// through the pod's files sidecar. Code reads the upload and the skill,
// its output downloads and becomes an artifact, a symlink it plants is not
// served, nothing lands in threadbox's own folders, and after an idle stop
// (the pod deleted, the claim kept) the files are still there: a download
// and an upload boot the pod again.
func TestKubernetesStorageClassFiles(t *testing.T) {
	kubeconfig, ns, cs := needKubernetes(t)
	class := k8stest.Provisioner(t, cs, ns)
	oom := k8s.DefaultOOMEvents
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.oom_control"); err == nil {
		oom = "/sys/fs/cgroup/memory/memory.oom_control"
	}
	s := startServer(t, "", map[string]string{
		"SANDBOX_BACKEND": "kubernetes", "KUBECONFIG": kubeconfig, "K8S_NAMESPACE": ns, "K8S_NETWORK_POLICY": "unenforced",
		"K8S_HOST_PATH_VOLUMES": "false", "K8S_STORAGE_CLASS": class, "K8S_IMAGE_PULL_POLICY": "Never", "K8S_OOM_EVENTS": oom,
		"MODEL_PROVIDER": "runner", "SANDBOX_IDLE": "3s", "SWEEP_INTERVAL": "1s",
	})
	f := newWSFixture(t, s)
	pods := func() int {
		l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}

	if r := f.upload(t, f.admin, f.tid, "", "in.txt", "from-upload-sc"); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	arch := wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("csv-report", "Summarise CSV files")}, wsEntry{name: "tool.py", body: "print('hi')"})
	r := s.do("POST", appAPI+"/skills", f.admin, arch, "Content-Type", "application/zip")
	if r.status != 201 {
		t.Fatalf("upload skill: %d %s", r.status, r.body)
	}
	skillID := r.json(t)["id"].(string)
	r = s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
		"content": "```bash\ncat /mnt/user-data/uploads/in.txt; echo; grep -c csv-report /mnt/skills/csv-report/SKILL.md; " +
			"touch /mnt/skills/csv-report/x 2>/dev/null || echo skills-read-only; " +
			"echo made-in-a-pod-sc > /mnt/user-data/outputs/sc.txt; ln -s /etc/passwd /mnt/user-data/outputs/leak.txt\n```",
		"skills": []string{skillID},
		"pgpt":   map[string]any{"tools": []any{"code_execution"}},
	})
	if body := string(r.body); r.status != 200 || !strings.Contains(body, `"stdout":"from-upload-sc\n2\nskills-read-only\n"`) {
		t.Fatalf("chat turn: %d %s", r.status, r.body)
	}
	if d := f.download(f.admin, f.tid, "/mnt/user-data/outputs/sc.txt"); d.status != 200 || string(d.body) != "made-in-a-pod-sc\n" {
		t.Fatalf("download of the pod's output: %d %q", d.status, d.body)
	}
	if d := f.download(f.admin, f.tid, "/mnt/user-data/outputs/leak.txt"); d.status == 200 || strings.Contains(string(d.body), "root:") {
		t.Fatalf("a symlink to /etc/passwd was served: %d %q", d.status, d.body)
	}
	var art string
	for _, a := range s.do("GET", appAPI+"/project/"+f.pid+"/artifacts", f.admin, nil).json(t)["data"].([]any) {
		if a := a.(map[string]any); a["name"] == "sc.txt" {
			art = a["id"].(string)
		}
	}
	if art == "" {
		t.Fatal("the output did not become an artifact")
	}
	if dl := s.do("GET", appAPI+"/artifact/"+art+"/content", f.admin, nil); dl.status != 200 || string(dl.body) != "made-in-a-pod-sc\n" {
		t.Fatalf("artifact content: %d %q", dl.status, dl.body)
	}
	// The upload and the output are not in threadbox's own folders; only
	// the turn's time-travel snapshot, kept apart, holds a copy of them.
	filepath.WalkDir(s.dataDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p == filepath.Join(s.dataDir, "claim-snapshots") {
			return fs.SkipDir
		}
		if err == nil && (d.Name() == "in.txt" || d.Name() == "sc.txt") {
			t.Errorf("%s is in threadbox's folders: the file did not go through the pod", p)
		}
		return nil
	})

	// The idle stop deletes the pod and keeps the claim.
	deadline := time.Now().Add(2 * time.Minute)
	for pods() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle sandbox's pod was not deleted")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if d := f.download(f.admin, f.tid, "/mnt/user-data/outputs/sc.txt"); d.status != 200 || string(d.body) != "made-in-a-pod-sc\n" {
		t.Fatalf("download after an idle stop: %d %q", d.status, d.body)
	}
	for pods() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle sandbox's pod was not deleted")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if r := f.upload(t, f.admin, f.tid, "", "second.txt", "uploaded-while-idle"); r.status != 200 {
		t.Fatalf("upload to an idle thread: %d %s", r.status, r.body)
	}
	r = s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{
		"content": "```bash\ncat /mnt/user-data/uploads/second.txt /mnt/user-data/uploads/in.txt\n```",
		"pgpt":    map[string]any{"tools": []any{"code_execution"}},
	})
	if body := string(r.body); r.status != 200 || !strings.Contains(body, "uploaded-while-idlefrom-upload-sc") {
		t.Fatalf("turn after an idle stop: %d %s", r.status, r.body)
	}
	s.stop()
}

// TestKubernetesRewind: a thread's turns in pods are snapshotted like any
// other's, whether the claims are the node's host folders
// (K8S_HOST_PATH_VOLUMES) or come from a storage class that threadbox
// reaches only through the pod's files sidecar: a rewind gives the
// container its first turn's files back, removing what later turns
// added, and the pod's next command sees exactly them; a call's change
// list and the revert of its changes work on the claim too.
func TestKubernetesRewind(t *testing.T) {
	kubeconfig, ns, cs := needKubernetes(t)
	for _, mode := range []string{"host-path", "storage-class"} {
		t.Run(mode, func(t *testing.T) {
			env := map[string]string{
				"SANDBOX_BACKEND": "kubernetes", "KUBECONFIG": kubeconfig, "K8S_NAMESPACE": ns, "K8S_NETWORK_POLICY": "unenforced",
				"K8S_HOST_PATH_VOLUMES": "true", "K8S_IMAGE_PULL_POLICY": "Never",
			}
			if mode == "storage-class" {
				env["K8S_HOST_PATH_VOLUMES"], env["K8S_STORAGE_CLASS"] = "false", k8stest.Provisioner(t, cs, ns)
			}
			s, fake := modelServer(t, "", "anthropic", env)
			f := newWSFixture(t, s)
			turn := func(cmd, text string) string {
				t.Helper()
				fake.Push(bashStep(cmd), textStep("done"))
				r := s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{"content": text, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
				mustStatus(t, text, r, 200)
				return lastAnswer(t, f, f.admin, f.tid)
			}
			const ws = "/home/agent/workspace"
			first := turn("echo one > "+ws+"/a.txt", "turn 1")
			turn("echo two > "+ws+"/a.txt; echo b > "+ws+"/b.txt", "turn 2")
			changes := string(s.do("GET", appAPI+"/thread/"+f.tid+"/changes", f.admin, nil).body)
			if !strings.Contains(changes, "workspace/b.txt") {
				t.Fatalf("the change list does not name the second turn's new file: %s", changes)
			}
			mustStatus(t, "rewind", s.do("POST", appAPI+"/thread/"+f.tid+"/rewind", f.admin, map[string]any{"message_id": first}), 200)
			if mode == "host-path" {
				if got, want := threadFiles(t, s, f.tid), map[string]string{"workspace/a.txt": "one\n"}; !maps.Equal(got, want) {
					t.Fatalf("after the rewind: %v, want %v", got, want)
				}
			}
			lastOutput := func() string {
				h := f.history(t, f.admin, f.tid)
				last, _ := json.Marshal(h[len(h)-1])
				return string(last)
			}
			turn("cat "+ws+"/a.txt; ls "+ws, "after the rewind")
			if last := lastOutput(); !strings.Contains(last, `one\na.txt\n`) || strings.Contains(last, "b.txt") {
				t.Fatalf("the pod does not see exactly the rewound files: %s", last)
			}
			// Reverting one call's changes puts back exactly its paths.
			third := turn("echo three > "+ws+"/a.txt; echo c > "+ws+"/c.txt", "turn 3")
			calls := callIDs(t, f, f.admin, f.tid, third)
			if len(calls) != 1 {
				t.Fatalf("turn 3's calls: %v", calls)
			}
			mustStatus(t, "revert", s.do("POST", appAPI+"/thread/"+f.tid+"/calls/"+calls[0]+"/revert", f.admin, nil), 200)
			turn("cat "+ws+"/a.txt; ls "+ws, "after the revert")
			if last := lastOutput(); !strings.Contains(last, `one\na.txt\n`) || strings.Contains(last, "c.txt") {
				t.Fatalf("the pod does not see the reverted files: %s", last)
			}
			// Deleting the thread removes its snapshots, and with a storage
			// class its claim's mirror.
			mustStatus(t, "delete the thread", s.do("DELETE", appAPI+"/thread/"+f.tid, f.admin, nil), 204)
			for _, dir := range []string{"snapshots", "claim-snapshots"} {
				filepath.WalkDir(filepath.Join(s.dataDir, dir), func(p string, d fs.DirEntry, err error) error {
					if err == nil && strings.Contains(p, f.tid) {
						t.Errorf("%s is left after the thread was deleted", p)
					}
					return nil
				})
			}
		})
	}
}
