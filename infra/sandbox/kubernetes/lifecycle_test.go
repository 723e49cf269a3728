package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	k8s "threadbox/infra/sandbox/kubernetes"
	"threadbox/infra/sandbox/sandboxtest"
)

// folders lays out host folders for the test's containers and removes them
// when it ends.
func folders(t *testing.T) *hostdirs.Layout {
	t.Helper()
	data, err := os.MkdirTemp("", "threadbox-k8stest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	return hostdirs.New(data, hostdirs.Options{Quota: hostdirs.QuotaNone})
}

func bootOn(t *testing.T, be sandbox.Backend, dirs *hostdirs.Layout, id string) {
	t.Helper()
	d, err := dirs.Prepare(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := be.Ensure(ctx, sandbox.Spec{ID: id, Mounts: d.Mounts()}); err != nil {
		t.Fatalf("ensure %s: %v", id, err)
	}
}

func sh(t *testing.T, be sandbox.Backend, id, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := be.Exec(ctx, id, sandboxtest.Sh(script, 30*time.Second))
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// podOf returns the pod of container id (by its labels' annotation) or nil.
func (c *cluster) podOf(t *testing.T, id string) *metav1.ObjectMeta {
	t.Helper()
	pods, err := c.cs.CoreV1().Pods(c.ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelManaged + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[k8s.AnnotationContainer] == id && p.DeletionTimestamp == nil {
			return &p.ObjectMeta
		}
	}
	return nil
}

// objects counts the claims and policies of container id.
func (c *cluster) objects(t *testing.T, id string) (claims, policies int) {
	t.Helper()
	ctx := context.Background()
	pvcs, err := c.cs.CoreV1().PersistentVolumeClaims(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		if p.Annotations[k8s.AnnotationContainer] == id && p.DeletionTimestamp == nil {
			claims++
		}
	}
	nps, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range nps.Items {
		if p.Annotations[k8s.AnnotationContainer] == id {
			policies++
		}
	}
	return claims, policies
}

// TestIdleStopAndOutsideDelete: an idle stop deletes the pod and keeps the
// claim; a pod deleted from outside ends the running command with
// unavailable; each time the next command re-creates the pod over the same
// files. Remove deletes pod, claim and policy.
func TestIdleStopAndOutsideDelete(t *testing.T) {
	c := newCluster(t)
	be := c.backend(t, "life")
	dirs := folders(t)
	id := "ctr-life"
	bootOn(t, be, dirs, id)
	if got := sh(t, be, id, "echo kept > f && cat f"); got != "kept" {
		t.Fatalf("write: %q", got)
	}
	first := c.podOf(t, id)
	if first == nil {
		t.Fatal("no pod after boot")
	}
	if cl, np := c.objects(t, id); cl != 1 || np != 1 {
		t.Fatalf("after boot: %d claims, %d policies; want 1 and 1", cl, np)
	}

	// Idle stop: pod gone, claim kept.
	if err := be.Stop(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if p := c.podOf(t, id); p != nil {
		t.Errorf("pod %s still there after stop", p.Name)
	}
	if cl, np := c.objects(t, id); cl != 1 || np != 1 {
		t.Errorf("after stop: %d claims, %d policies; want the claim and policy kept", cl, np)
	}
	if st, err := be.Status(context.Background(), id); err != nil || st.State != sandbox.StateStopped {
		t.Errorf("status after stop: %+v %v, want stopped", st, err)
	}
	bootOn(t, be, dirs, id)
	if got := sh(t, be, id, "cat f"); got != "kept" {
		t.Errorf("after idle stop: %q, want the file kept", got)
	}
	second := c.podOf(t, id)
	if second == nil || second.UID == first.UID {
		t.Fatalf("pod not re-created after stop")
	}

	// A pod deleted from outside, under a running command.
	errc := make(chan error, 1)
	go func() {
		_, err := be.Exec(context.Background(), id, sandboxtest.Sh("sleep 60", 90*time.Second))
		errc <- err
	}()
	time.Sleep(time.Second)
	zero := int64(0)
	if err := c.cs.CoreV1().Pods(c.ns).Delete(context.Background(), second.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("running command after an outside delete: %v, want unavailable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("running command did not end after its pod was deleted")
	}
	bootOn(t, be, dirs, id)
	if got := sh(t, be, id, "cat f"); got != "kept" {
		t.Errorf("after an outside delete: %q, want the file kept", got)
	}

	// Remove: everything goes.
	if err := be.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if p := c.podOf(t, id); p != nil {
		t.Errorf("pod %s still there after remove", p.Name)
	}
	if cl, np := c.objects(t, id); cl != 0 || np != 0 {
		t.Errorf("after remove: %d claims, %d policies; want none", cl, np)
	}
	if st, err := be.Status(context.Background(), id); err != nil || st.State != sandbox.StateMissing {
		t.Errorf("status after remove: %+v %v, want missing", st, err)
	}
}

// TestReconcile: the pods a killed threadbox left are adopted (the same
// pod answers, its /tmp kept) or deleted with their claims at the
// next start, as decide says; another instance's pods are never touched.
func TestReconcile(t *testing.T) {
	c := newCluster(t)
	dirs := folders(t)
	inst := fmt.Sprintf("rec%d", time.Now().UnixNano()%1e6)
	old := c.backend(t, inst)
	other := c.backend(t, inst+"x")
	keep, drop, theirs := "ctr-keep", "ctr-drop", "ctr-theirs"
	bootOn(t, old, dirs, keep)
	bootOn(t, old, dirs, drop)
	bootOn(t, other, dirs, theirs)
	// /tmp is the pod's own emptyDir: it is there only in the same pod.
	sh(t, old, keep, "echo mine > f; echo same-pod > /tmp/marker")
	keepPod := c.podOf(t, keep)
	theirPod := c.podOf(t, theirs)
	// The old server dies: its streams end, its pods stay.
	old.Close()

	fresh := c.backend(t, inst)
	var asked []string
	adopted, removed, err := fresh.Reconcile(context.Background(), func(id string) sandbox.Verdict {
		asked = append(asked, id)
		if id == keep {
			return sandbox.Adopt
		}
		return sandbox.Drop
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(asked)
	if !slices.Equal(adopted, []string{keep}) || !slices.Equal(removed, []string{drop}) {
		t.Errorf("adopted %q removed %q, want [%s] [%s]", adopted, removed, keep, drop)
	}
	if slices.Contains(asked, theirs) {
		t.Errorf("decide asked about another instance's container %s", theirs)
	}
	if got := sh(t, fresh, keep, "cat f /tmp/marker"); got != "mine\nsame-pod" {
		t.Errorf("adopted sandbox: %q, want its file and its pod's /tmp", got)
	}
	if p := c.podOf(t, keep); p == nil || p.UID != keepPod.UID {
		t.Errorf("adopted sandbox's pod was replaced")
	}
	if p := c.podOf(t, drop); p != nil {
		t.Errorf("dropped sandbox's pod %s still there", p.Name)
	}
	if cl, np := c.objects(t, drop); cl != 0 || np != 0 {
		t.Errorf("dropped sandbox: %d claims, %d policies left", cl, np)
	}
	if p := c.podOf(t, theirs); p == nil || p.UID != theirPod.UID {
		t.Errorf("another instance's pod was touched")
	}
	if got := sh(t, other, theirs, "echo still"); got != "still" {
		t.Errorf("another instance's sandbox: %q", got)
	}
	// The dropped container's volume is gone too.
	pvs, err := c.cs.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range pvs.Items {
		if pv.Annotations[k8s.AnnotationContainer] == drop && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == c.ns && pv.DeletionTimestamp == nil {
			t.Errorf("dropped sandbox's volume %s left", pv.Name)
		}
	}
}
