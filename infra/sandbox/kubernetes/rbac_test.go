package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/hostdirs"
	k8s "threadbox/infra/sandbox/kubernetes"
)

// documentedRole reads the Role of docs/kubernetes/role.yaml.
func documentedRole(t *testing.T) *rbacv1.Role {
	t.Helper()
	b, err := os.ReadFile("../../../docs/kubernetes/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var r rbacv1.Role
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if r.Kind == "Role" {
			return &r
		}
	}
	t.Fatal("no Role in docs/kubernetes/role.yaml")
	return nil
}

// TestMinimalRole runs the backend's whole lifecycle with a service
// account's token bound to exactly the documented Role (no cluster-wide
// rights: the claim binds to a volume an admin made, through a storage
// class of its own, as a provisioner would): boot, exec, idle stop, boot
// again over the same files, reconcile, remove.
func TestMinimalRole(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	admin := c.cs
	role := documentedRole(t)
	role.Namespace = c.ns
	if _, err := admin.RbacV1().Roles(c.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "threadbox"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(c.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "threadbox"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "threadbox", Namespace: c.ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tok, err := admin.CoreV1().ServiceAccounts(c.ns).CreateToken(ctx, "threadbox", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adminRC, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rest.Config{Host: adminRC.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: adminRC.CAFile, CAData: adminRC.CAData}}

	// The volume an admin (or a provisioner) makes: the claim's folders
	// belong to the sandbox user.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"workspace", "uploads", "outputs", "skills"} {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, hostdirs.SandboxUID, hostdirs.SandboxGID); err != nil {
			t.Fatal(err)
		}
	}
	class := "tb-static-" + c.ns
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + c.ns, Labels: map[string]string{k8s.LabelManaged: "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})

	be := c.backend(t, "rbac", func(cfg *k8s.Config) {
		cfg.Kubeconfig, cfg.REST = "", rc
		cfg.HostPathVolumes = false
		cfg.StorageClass = class
		cfg.Limits = sandbox.Limits{DiskBytes: 64 << 20}
	})
	id := "ctr-rbac"
	ectx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := be.Ensure(ectx, sandbox.Spec{ID: id}); err != nil {
		t.Fatalf("ensure with the documented Role: %v", err)
	}
	if got := sh(t, be, id, "echo through-the-role > w && cat w && id -u"); got != "through-the-role\n1000" {
		t.Errorf("exec: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "workspace", "w")); err != nil || string(b) != "through-the-role\n" {
		t.Errorf("the file on the claim's volume: %q %v", b, err)
	}
	if err := be.Stop(ctx, id); err != nil {
		t.Fatalf("stop with the documented Role: %v", err)
	}
	if err := be.Ensure(ectx, sandbox.Spec{ID: id}); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
	if got := sh(t, be, id, "cat w"); got != "through-the-role" {
		t.Errorf("after idle stop: %q", got)
	}
	if _, _, err := be.Reconcile(ctx, func(string) sandbox.Verdict { return sandbox.Leave }); err != nil {
		t.Errorf("reconcile with the documented Role: %v", err)
	}
	if err := be.Remove(ctx, id); err != nil {
		t.Fatalf("remove with the documented Role: %v", err)
	}
	if cl, np := c.objects(t, id); cl != 0 || np != 0 {
		t.Errorf("after remove: %d claims, %d policies", cl, np)
	}
	// And the token is no more than the Role: it may not read secrets.
	if _, err := k8sClient(t, rc).CoreV1().Secrets(c.ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("the service account can list secrets: its rights are wider than the Role")
	}
}
