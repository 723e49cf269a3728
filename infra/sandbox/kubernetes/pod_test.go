package kubernetes

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
)

func offline(t *testing.T, cfg Config) *Backend {
	t.Helper()
	cfg.REST = &rest.Config{Host: "https://127.0.0.1:1"} // never dialled here
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPodSpecHardened: the pod carries every hardening setting (docs/scale-out.md).
func TestPodSpecHardened(t *testing.T) {
	b := offline(t, Config{Settings: boxes.Settings{Instance: "prod"}, RuntimeClass: "gvisor", HostPathVolumes: true})
	root := "/data/containers/abc"
	spec := sandbox.Spec{ID: "abc", Env: []string{"A=b=c"}, Mounts: []sandbox.Mount{
		{Source: root + "/workspace", Target: sandbox.WorkspaceDir},
		{Source: root + "/uploads", Target: sandbox.UploadsDir, ReadOnly: true},
		{Source: root + "/outputs", Target: sandbox.OutputsDir},
		{Source: root + "/skills", Target: sandbox.SkillsDir, ReadOnly: true},
	}}
	gotRoot, mounts, err := b.subPaths(spec)
	if err != nil || gotRoot != root {
		t.Fatalf("claim root %q %v, want %q", gotRoot, err, root)
	}
	l := sandbox.Limits{MemoryBytes: 1 << 30, CPUs: 0.5}.Or(b.cfg.Limits)
	p := b.podSpec(spec, mounts, l)
	ps := p.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("service account token mounted")
	}
	if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %v", ps.RuntimeClassName)
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks || ps.HostNetwork || ps.HostPID || ps.HostIPC || ps.ShareProcessNamespace != nil {
		t.Error("pod shares something with the node or other containers")
	}
	if ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccomp is not RuntimeDefault")
	}
	for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != 1000 || *sc.RunAsGroup != 1000 ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
			sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
		if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
			t.Errorf("container %s without limits", c.Name)
		}
	}
	c := ps.Containers[0]
	if c.Resources.Limits.Memory().Value() != 1<<30 || c.Resources.Limits.Cpu().MilliValue() != 500 {
		t.Errorf("limits %v, want the spec's memory and cpu", c.Resources.Limits)
	}
	if !c.Stdin || c.StdinOnce || c.TTY || !slices.Equal(c.Command, []string{sandbox.AgentPath}) {
		t.Errorf("sandbox container: stdin %v once %v tty %v command %q", c.Stdin, c.StdinOnce, c.TTY, c.Command)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "A" && e.Value == "b=c" }) {
		t.Errorf("env %v", c.Env)
	}
	want := map[string]struct {
		sub string
		ro  bool
	}{
		sandbox.WorkspaceDir: {"workspace", false}, sandbox.UploadsDir: {"uploads", true},
		sandbox.OutputsDir: {"outputs", false}, sandbox.SkillsDir: {"skills", true},
		"/opt/threadbox": {"", true}, "/tmp": {"", false},
	}
	for _, m := range c.VolumeMounts {
		w, ok := want[m.MountPath]
		if !ok || w.sub != m.SubPath || w.ro != m.ReadOnly {
			t.Errorf("mount %+v", m)
		}
		delete(want, m.MountPath)
	}
	if len(want) != 0 {
		t.Errorf("mounts missing: %v", want)
	}
	for _, v := range ps.Volumes {
		if v.Name == volTmp && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.Value() != l.TmpBytes) {
			t.Errorf("tmp volume %+v", v)
		}
	}
	if p.Labels[LabelManaged] != "true" || p.Labels[LabelInstance] != "prod" || p.Labels[LabelContainer] == "" || p.Annotations[AnnotationContainer] != "abc" {
		t.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	}
}

// TestNames: object names are valid DNS labels of any container id and
// instance, and differ between instances.
func TestNames(t *testing.T) {
	a := offline(t, Config{Settings: boxes.Settings{Instance: "Some_Very.Long/Instance-Name-Of-Many-Characters"}})
	b := offline(t, Config{Settings: boxes.Settings{Instance: "other"}})
	id := strings.Repeat("ctr_ÄÖ/..", 20)
	pa, ca, ha := a.names(id)
	pb, _, _ := b.names(id)
	for _, n := range []string{pa, ca, pb, a.volumeName(id)} {
		if errs := validation.IsDNS1123Label(n); len(errs) != 0 {
			t.Errorf("%q: %v", n, errs)
		}
	}
	if errs := validation.IsValidLabelValue(ha); len(errs) != 0 || pa == pb {
		t.Errorf("hash label %q %v; pods %q %q", ha, errs, pa, pb)
	}
	for k, v := range a.labels(id) {
		if errs := validation.IsValidLabelValue(v); len(errs) != 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
}

// TestSubPathsDefault: without host folders the claim holds the sandbox's
// folders; host-path volumes need them.
func TestSubPathsDefault(t *testing.T) {
	b := offline(t, Config{})
	_, m, err := b.subPaths(sandbox.Spec{ID: "x"})
	if err != nil || len(m) != 4 || m[1].Source != "uploads" || !m[1].ReadOnly {
		t.Errorf("default mounts %+v %v", m, err)
	}
	if _, _, err := offline(t, Config{HostPathVolumes: true}).subPaths(sandbox.Spec{ID: "x"}); err == nil {
		t.Error("host path volumes without host folders accepted")
	}
	p := b.podSpec(sandbox.Spec{ID: "x"}, m, b.cfg.Limits)
	if p.Spec.SecurityContext.FSGroup == nil || *p.Spec.SecurityContext.FSGroup != 1000 {
		t.Error("a provisioned claim's folders are not given to the sandbox user (fsGroup)")
	}
}

// TestIsolationFromRuntimeClass: the matrix's isolation follows the class.
func TestIsolationFromRuntimeClass(t *testing.T) {
	for rc, want := range map[string]string{"": "namespaces", "gvisor": "application kernel", "runsc": "application kernel", "kata-qemu": "microVM"} {
		if got := offline(t, Config{RuntimeClass: rc}).Isolation(); got != want {
			t.Errorf("runtime class %q: %q, want %q", rc, got, want)
		}
	}
}

// TestFilesSidecar: in storage-class mode the pod has a files sidecar, as
// hardened as the sandbox container, that mounts the same sub-folders of
// the claim at the same paths, all writable, while the sandbox container
// keeps uploads and skills read-only; host path volumes need none.
func TestFilesSidecar(t *testing.T) {
	b := offline(t, Config{})
	_, mounts, err := b.subPaths(sandbox.Spec{ID: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	p := b.podSpec(sandbox.Spec{ID: "abc"}, mounts, b.cfg.Limits)
	if len(p.Spec.Containers) != 2 || p.Spec.Containers[1].Name != containerFiles {
		t.Fatalf("containers %d, want the sandbox and the files sidecar", len(p.Spec.Containers))
	}
	sb, fc := p.Spec.Containers[0], p.Spec.Containers[1]
	if fc.Image != DefaultAgentImage || !slices.Equal(fc.Command, []string{FilesAgentPath}) || !fc.Stdin {
		t.Errorf("sidecar image %s command %v stdin %v", fc.Image, fc.Command, fc.Stdin)
	}
	if !reflect.DeepEqual(fc.SecurityContext, sb.SecurityContext) {
		t.Errorf("sidecar security context %+v differs from the sandbox's %+v", fc.SecurityContext, sb.SecurityContext)
	}
	if fc.Resources.Limits.Memory().IsZero() || fc.Resources.Limits.Cpu().IsZero() {
		t.Error("sidecar without limits")
	}
	ro := map[string]bool{}
	for _, m := range sb.VolumeMounts {
		if m.Name == volFiles {
			ro[m.MountPath] = m.ReadOnly
		}
	}
	if !ro[sandbox.UploadsDir] || !ro[sandbox.SkillsDir] || ro[sandbox.OutputsDir] || len(ro) != 4 {
		t.Errorf("sandbox mounts read-only %v", ro)
	}
	var paths []string
	for _, m := range fc.VolumeMounts {
		if m.Name != volFiles || m.ReadOnly {
			t.Errorf("sidecar mount %+v", m)
		}
		paths = append(paths, m.MountPath+"="+m.SubPath)
	}
	slices.Sort(paths)
	want := []string{sandbox.WorkspaceDir + "=workspace", sandbox.SkillsDir + "=skills", sandbox.OutputsDir + "=outputs", sandbox.UploadsDir + "=uploads"}
	slices.Sort(want)
	if !slices.Equal(paths, want) {
		t.Errorf("sidecar mounts %v, want %v", paths, want)
	}

	hp := offline(t, Config{HostPathVolumes: true})
	_, mounts, err = hp.subPaths(sandbox.Spec{ID: "abc", Mounts: []sandbox.Mount{{Source: "/d/abc/workspace", Target: sandbox.WorkspaceDir}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(hp.podSpec(sandbox.Spec{ID: "abc"}, mounts, hp.cfg.Limits).Spec.Containers); n != 1 {
		t.Errorf("host path volumes: %d containers, want 1", n)
	}
}
