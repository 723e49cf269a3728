package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
)

// TestNetworkPolicyDeclaration: the backend runs no sandbox until the
// operator declares whether a policy engine enforces the sandboxes'
// NetworkPolicy; undeclared (or misspelt) it is unavailable with the
// setting in its reason and refuses boots before any request to the
// cluster. Declared unenforced, the capability matrix warns.
func TestNetworkPolicyDeclaration(t *testing.T) {
	cases := []struct {
		declared  NetworkPolicy
		refusal   string // in the error; "" when it runs
		warns     bool
		mechanism string
	}{
		{"", "K8S_NETWORK_POLICY is not set", false, ""},
		{"enforce", `K8S_NETWORK_POLICY="enforce"`, false, ""},
		{NetworkPolicyEnforced, "", false, "default-deny NetworkPolicy per sandbox (enforced"},
		{NetworkPolicyUnenforced, "", true, "network: not isolated"},
	}
	for _, tc := range cases {
		t.Run(string(tc.declared), func(t *testing.T) {
			b := offline(t, Config{Namespace: "sandboxes", NetworkPolicy: tc.declared})
			cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes"}})
			b.cs = cs
			ctx := context.Background()
			err := b.Available(ctx)
			switch {
			case tc.refusal == "" && err != nil:
				t.Fatalf("available: %v", err)
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
				t.Fatalf("available: %v, want a refusal naming %q", err, tc.refusal)
			}
			if tc.refusal != "" {
				err := b.Ensure(ctx, sandbox.Spec{ID: "c1"})
				if err == nil || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("ensure: %v, want the refusal", err)
				}
				if acts := cs.Actions(); len(acts) != 0 {
					t.Fatalf("a refused backend asked the cluster: %v", acts)
				}
			}
			if w := b.Warning(); (w != "") != tc.warns || (tc.warns && !strings.Contains(w, "not network-isolated")) {
				t.Fatalf("warning %q", w)
			}
			if _, how := b.EnforcedLimits(ctx); tc.mechanism != "" && !strings.Contains(how, tc.mechanism) {
				t.Fatalf("mechanism %q, want %q in it", how, tc.mechanism)
			}
		})
	}
}

// documentedRBAC reads docs/kubernetes/role.yaml: its Namespace, its Role
// and its ClusterRole.
func documentedRBAC(t *testing.T) (ns *corev1.Namespace, role *rbacv1.Role, cluster *rbacv1.ClusterRole) {
	t.Helper()
	b, err := os.ReadFile("../../../docs/kubernetes/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var doc json.RawMessage
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "Namespace":
			ns = &corev1.Namespace{}
			err = json.Unmarshal(doc, ns)
		case "Role":
			role = &rbacv1.Role{}
			err = json.Unmarshal(doc, role)
		case "ClusterRole":
			cluster = &rbacv1.ClusterRole{}
			err = json.Unmarshal(doc, cluster)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if ns == nil || role == nil || cluster == nil {
		t.Fatalf("docs/kubernetes/role.yaml: namespace %v, role %v, cluster role %v", ns != nil, role != nil, cluster != nil)
	}
	return ns, role, cluster
}

// grants flattens RBAC rules into "resource[/subresource] verb" entries.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				out = append(out, res+" "+v)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// attachGrants are the Role's grants no fake client can exercise: the
// agent's attach stream opens as a websocket (get) and falls back to SPDY
// (create).
var attachGrants = []string{"pods/attach create", "pods/attach get"}

// TestRoleIsWhatTheBackendUses: a sandbox's whole life against a fake
// cluster (objects made, pod created, status, reconcile dropping it,
// status of the removed container) makes only calls that the documented
// Role allows in the sandboxes' namespace, and the ClusterRole on
// volumes only with host path volumes; and every grant of the two is used
// by some call. The namespace enforces the restricted Pod Security
// Standard, which the backend's own pods meet.
func TestRoleIsWhatTheBackendUses(t *testing.T) {
	ns, role, cluster := documentedRBAC(t)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" || !maps.Equal(ns.Labels, SandboxNamespaceLabels) {
		t.Fatalf("the sandboxes' namespace has labels %v, want %v (the restricted Pod Security Standard)", ns.Labels, SandboxNamespaceLabels)
	}
	used := map[string]bool{}
	for _, hostPaths := range []bool{false, true} {
		trust := t.TempDir()
		if err := os.WriteFile(filepath.Join(trust, "ca-bundle.pem"), []byte("bundle"), 0o644); err != nil {
			t.Fatal(err)
		}
		b := offline(t, Config{Settings: boxes.Settings{TrustDir: trust}, Namespace: "sandboxes", HostPathVolumes: hostPaths, NetworkPolicy: NetworkPolicyEnforced})
		cs := fake.NewClientset()
		b.cs = cs
		ctx := context.Background()
		spec := sandbox.Spec{ID: "ctr-1"}
		if hostPaths {
			spec.Mounts = []sandbox.Mount{{Source: "/data/c/workspace", Target: sandbox.WorkspaceDir}, {Source: "/data/c/outputs", Target: sandbox.OutputsDir}}
		}
		root, mounts, err := b.subPaths(spec)
		if err != nil {
			t.Fatal(err)
		}
		l := spec.Limits.Or(b.cfg.Limits)
		if err := b.ensureObjects(ctx, spec, root, l); err != nil {
			t.Fatal(err)
		}
		// The trust ConfigMap is made by one process and replaced by the next.
		for range 2 {
			b.trustDone = false
			if err := b.ensureTrust(ctx); err != nil {
				t.Fatal(err)
			}
		}
		pod := b.podSpec(spec, mounts, l)
		if v := restrictedViolations(pod); len(v) > 0 {
			t.Errorf("host paths %v: the sandbox pod breaks the restricted Pod Security Standard: %v", hostPaths, v)
		}
		if _, err := cs.CoreV1().Pods("sandboxes").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if st, err := b.Status(ctx, spec.ID); err != nil || st.State != sandbox.StateStopped {
			t.Fatalf("status of a pod not held: %+v %v", st, err)
		}
		if _, removed, err := b.Reconcile(ctx, func(string) sandbox.Verdict { return sandbox.Drop }); err != nil || len(removed) != 1 {
			t.Fatalf("reconcile: %v %v", removed, err)
		}
		if st, err := b.Status(ctx, spec.ID); err != nil || st.State != sandbox.StateMissing {
			t.Fatalf("status after the drop: %+v %v", st, err)
		}
		allowed := grants(role.Rules)
		if hostPaths {
			allowed = append(allowed, grants(cluster.Rules)...)
		}
		for _, a := range cs.Actions() {
			call := a.GetResource().Resource
			if sub := a.GetSubresource(); sub != "" {
				call += "/" + sub
			}
			call += " " + a.GetVerb()
			if a.GetNamespace() != "" && a.GetNamespace() != "sandboxes" {
				t.Errorf("%s in namespace %q, outside the sandboxes' namespace", call, a.GetNamespace())
			}
			if !slices.Contains(allowed, call) {
				t.Errorf("host paths %v: %s is not allowed by docs/kubernetes/role.yaml", hostPaths, call)
			}
			used[call] = true
		}
	}
	for _, g := range append(grants(role.Rules), grants(cluster.Rules)...) {
		if !used[g] && !slices.Contains(attachGrants, g) {
			t.Errorf("docs/kubernetes/role.yaml grants %q, which the backend never uses", g)
		}
	}
}

// restrictedViolations lists what of the restricted Pod Security Standard
// a pod breaks.
func restrictedViolations(p *corev1.Pod) []string {
	var out []string
	s := p.Spec
	if s.HostNetwork || s.HostPID || s.HostIPC {
		out = append(out, "host namespaces")
	}
	podNonRoot := s.SecurityContext != nil && s.SecurityContext.RunAsNonRoot != nil && *s.SecurityContext.RunAsNonRoot
	podSeccomp := s.SecurityContext != nil && s.SecurityContext.SeccompProfile != nil
	for _, v := range s.Volumes {
		if v.PersistentVolumeClaim == nil && v.EmptyDir == nil && v.ConfigMap == nil && v.Secret == nil && v.Projected == nil && v.DownwardAPI == nil && v.CSI == nil && v.Ephemeral == nil {
			out = append(out, "volume "+v.Name+" of a kind restricted forbids")
		}
	}
	for _, c := range slices.Concat(s.InitContainers, s.Containers) {
		sc := c.SecurityContext
		if sc == nil {
			out = append(out, c.Name+": no security context")
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, c.Name+": privileged")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			out = append(out, c.Name+": privilege escalation allowed")
		}
		if !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
			out = append(out, c.Name+": may run as root")
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			out = append(out, c.Name+": runs as uid 0")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			out = append(out, c.Name+": capabilities not all dropped")
		} else if len(sc.Capabilities.Add) > 0 && !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) {
			out = append(out, c.Name+fmt.Sprintf(": adds capabilities %v", sc.Capabilities.Add))
		}
		seccomp := podSeccomp
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault || sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost
		}
		if !seccomp {
			out = append(out, c.Name+": no seccomp profile")
		}
		for _, port := range c.Ports {
			if port.HostPort != 0 {
				out = append(out, c.Name+": host port")
			}
		}
	}
	return out
}
