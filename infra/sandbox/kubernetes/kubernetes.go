// Package kubernetes runs sandboxes as pods of a Kubernetes cluster through
// client-go. Each sandbox is one pod whose main container's init
// process is the threadbox agent, copied into a shared emptyDir by an init
// container from the agent image (the sandbox image stays as it is); the
// host speaks the agent protocol over the pod's attach stream (stdin and
// stdout through the apiserver), so exec, streaming, sessions and loopback
// listeners work as with the docker backend. The per-container files live
// on a PersistentVolumeClaim per container, kept while the container lives
// (an idle stop deletes only the pod) and deleted with it, together with
// the sandbox's default-deny NetworkPolicy. Every object carries the labels
// threadbox.managed, threadbox.instance and threadbox.container (a hash of
// the container id, which an annotation holds in full), so Reconcile only
// ever touches its own instance's objects.
package kubernetes

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
)

// Labels and the annotation put on every object this backend creates.
const (
	LabelManaged        = "threadbox.managed"
	LabelInstance       = "threadbox.instance"
	LabelContainer      = "threadbox.container"
	AnnotationContainer = "threadbox.container-id"
)

// SandboxNamespaceLabels are the labels of the sandboxes' namespace
// (docs/kubernetes/role.yaml): the restricted Pod Security Standard, so
// that the pods/create of the backend's Role makes only pods as confined
// as its own.
var SandboxNamespaceLabels = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
}

// Defaults applied to zero fields of Config.
const (
	DefaultNamespace   = "default"
	DefaultImage       = "threadbox-sandbox:latest"
	DefaultAgentImage  = "threadbox-agent:latest"
	DefaultBootTimeout = 90 * time.Second
	// DefaultOOMEvents is the cgroup v2 memory.events file the agent reads
	// to tell an OOM kill; a cgroup v1 node needs
	// /sys/fs/cgroup/memory/memory.oom_control (Config.OOMEvents).
	DefaultOOMEvents = "/sys/fs/cgroup/memory.events"
)

// Container names inside a sandbox pod.
const (
	containerSandbox = "sandbox"
	containerAgent   = "agent"
)

// Config configures a Backend.
type Config struct {
	// Settings are what every backend takes: instance, limits, boot
	// timeout and logger.
	boxes.Settings

	// Kubeconfig is the path of a kubeconfig file; empty means in-cluster
	// credentials. REST, when set, is used instead of either.
	Kubeconfig string
	REST       *rest.Config
	// Namespace holds the sandboxes' objects; default DefaultNamespace.
	Namespace string
	// Image is the sandbox image; AgentImage holds /install and the static
	// /threadbox-agent (scripts/k8s-up.sh builds it).
	Image      string
	AgentImage string
	// PullPolicy of both images; default IfNotPresent.
	PullPolicy PullPolicy
	// RuntimeClass is the pods' runtimeClassName ("gvisor" in production);
	// empty leaves the cluster's default runtime.
	RuntimeClass string
	// StorageClass of the per-container claims; empty means the cluster's
	// default class.
	StorageClass string
	// HostPathVolumes binds each container's claim to a PersistentVolume
	// of its own over the host folders the Spec mounts (hostPath), for a
	// cluster whose node shares threadbox's data folder (a single-node
	// cluster on the same machine, as in the tests): threadbox then sees
	// the sandbox's files as the other backends let it. It needs the
	// cluster-wide persistentvolumes permission (docs/scale-out.md).
	HostPathVolumes bool
	// PodPidsLimit declares the podPidsLimit of the nodes' kubelets (a
	// node setting: the pod spec has no pids field), which the capability
	// matrix then lists; 0 says nothing is known and lists no pids limit.
	PodPidsLimit int64
	// NetworkPolicy declares whether a policy engine enforces the
	// sandboxes' default-deny NetworkPolicy (K8S_NETWORK_POLICY): the
	// backend cannot see that with its Role, and the cluster accepts the
	// policy and ignores it without one. Empty, or another value, refuses
	// every boot: the backend is unavailable and says why.
	NetworkPolicy NetworkPolicy
	// OOMEvents is the agent's OOM counter file inside the pod; default
	// DefaultOOMEvents.
	OOMEvents string
}

// NetworkPolicy is what the operator declares about the enforcement of
// the sandboxes' NetworkPolicy.
type NetworkPolicy string

// The declarations Config.NetworkPolicy takes.
const (
	// NetworkPolicyEnforced: a policy engine (Calico, Cilium, ...) enforces
	// NetworkPolicies on the sandbox nodes, so each sandbox's default-deny
	// policy keeps its pod off the network.
	NetworkPolicyEnforced NetworkPolicy = "enforced"
	// NetworkPolicyUnenforced: nothing enforces them; the operator runs
	// sandboxes that can reach the pod network anyway, and the capability
	// matrix warns (Warning).
	NetworkPolicyUnenforced NetworkPolicy = "unenforced"
)

// networkPolicyErr refuses to run sandboxes unless the operator declared
// whether their NetworkPolicy is enforced: an undeclared cluster may well
// have no policy engine, and then code in a pod reaches the cluster's
// services, its nodes and cloud metadata addresses.
func (b *Backend) networkPolicyErr() error {
	switch b.cfg.NetworkPolicy {
	case NetworkPolicyEnforced, NetworkPolicyUnenforced:
		return nil
	case "":
		return errors.New("kubernetes: K8S_NETWORK_POLICY is not set: a sandbox's default-deny NetworkPolicy isolates its pod only where a policy engine (Calico, Cilium, ...) enforces NetworkPolicies, and threadbox cannot tell whether one does; " +
			"set K8S_NETWORK_POLICY=enforced when one enforces them on the sandbox nodes, or K8S_NETWORK_POLICY=unenforced to run sandboxes that can reach the cluster network")
	}
	return fmt.Errorf("kubernetes: K8S_NETWORK_POLICY=%q: want %q or %q", string(b.cfg.NetworkPolicy), NetworkPolicyEnforced, NetworkPolicyUnenforced)
}

// Warning says, when the operator declared that nothing enforces the
// sandboxes' NetworkPolicy, that their pods are not network-isolated; the
// capability matrix shows it and the server logs it at start.
func (b *Backend) Warning() string {
	if b.cfg.NetworkPolicy != NetworkPolicyUnenforced {
		return ""
	}
	return "sandbox pods are not network-isolated: K8S_NETWORK_POLICY=unenforced declares that no policy engine enforces their default-deny NetworkPolicy, so code in them reaches the cluster's network (its services, the nodes, cloud metadata addresses); not for untrusted code"
}

// PullPolicy is a pod's image pull policy ("IfNotPresent", "Never",
// "Always").
type PullPolicy = corev1.PullPolicy

// Backend runs sandboxes as pods. It implements sandbox.Backend.
type Backend struct {
	cfg  Config
	rest *rest.Config
	cs   kubernetes.Interface
	log  *slog.Logger

	boxes           *boxes.Set[*box]
	boxes.Ops[*box] // Exec, Start, Listen, SandboxCPU (not counted)

	// A pod cannot be restored from a checkpoint.
	boxes.FilesOnly
	// A pod's volumes are fixed when it is created, so a container's claim
	// cannot be bound into a pod already running: new containers boot cold.
	boxes.NoWarmPool

	trustMu   sync.Mutex
	trustDone bool // the trust ConfigMap is written (trust.go)
}

// box is one running sandbox: its pod and the agent over the attach stream.
type box struct {
	b         *Backend
	id        string
	pod       string
	uid       string // the pod's uid, to tell a re-created pod apart
	agent     boxes.Agent
	stop      func()        // ends the attach stream
	done      chan struct{} // closed when the attach stream ends
	startedAt time.Time

	// The files sidecar's agent (storage-class mode, files.go), attached
	// on first use.
	filesMu   sync.Mutex
	files     *agent.Client
	filesStop func()
	filesDone chan struct{}
}

// New connects to the cluster the config names.
func New(cfg Config) (*Backend, error) {
	rc := cfg.REST
	if rc == nil {
		var err error
		if cfg.Kubeconfig != "" {
			rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		} else {
			rc, err = rest.InClusterConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes: config: %w", err)
		}
	}
	rc = rest.CopyConfig(rc)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	cfg.Namespace = cmp.Or(cfg.Namespace, DefaultNamespace)
	cfg.Image = cmp.Or(cfg.Image, DefaultImage)
	cfg.AgentImage = cmp.Or(cfg.AgentImage, DefaultAgentImage)
	cfg.PullPolicy = cmp.Or(cfg.PullPolicy, corev1.PullIfNotPresent)
	cfg.OOMEvents = cmp.Or(cfg.OOMEvents, DefaultOOMEvents)
	cfg.Defaults(DefaultBootTimeout)
	lg := cfg.Logger
	b := &Backend{cfg: cfg, rest: rc, cs: cs, log: lg, boxes: boxes.New[*box]("kubernetes", lg),
		FilesOnly:  boxes.KeepsFilesOnly("kubernetes", checkpointReason),
		NoWarmPool: boxes.WarmsNone("kubernetes", "a running pod's volumes cannot change")}
	b.Ops = boxes.NewOps(b.boxes, b.missing)
	return b, nil
}

// Close ends the attach streams; pods keep running (a later Reconcile
// adopts them).
func (b *Backend) Close() error {
	for _, bx := range b.boxes.TakeAll() {
		bx.stop()
	}
	return nil
}

// Name returns "kubernetes".
func (b *Backend) Name() string { return "kubernetes" }

// Isolation names the isolation of the pods from their runtime class: an
// application kernel for gVisor (runsc), a microVM for Kata or Firecracker,
// namespaces for the cluster's default runtime (runc). The class's name is
// in EnforcedLimits' mechanism.
func (b *Backend) Isolation() string {
	rc := strings.ToLower(b.cfg.RuntimeClass)
	switch {
	case strings.Contains(rc, "gvisor") || strings.Contains(rc, "runsc"):
		return "application kernel"
	case strings.Contains(rc, "kata") || strings.Contains(rc, "firecracker"):
		return "microVM"
	}
	return "namespaces"
}

// RuntimeClass returns the pods' runtimeClassName ("" for the default).
func (b *Backend) RuntimeClass() string { return b.cfg.RuntimeClass }

// Namespace returns the namespace of the sandboxes.
func (b *Backend) Namespace() string { return b.cfg.Namespace }

// EnforcedLimits names the limits enforced on every sandbox and how:
// memory and cpu (container limits, kubelet cgroups), tmp (a
// memory-backed emptyDir's size), nofile (the agent lowers RLIMIT_NOFILE,
// which every command inherits: a pod has no field for it) and, when
// Config.PodPidsLimit declares the nodes' kubelet podPidsLimit, pids (a
// node-wide setting, the same for every pod of the node, that the backend
// cannot read back; docs/backends.md). The claim's size is a request to
// the storage class, enforced only where its provisioner enforces sizes,
// so disk is not listed.
func (b *Backend) EnforcedLimits(context.Context) ([]string, string) {
	rc := b.cfg.RuntimeClass
	if rc == "" {
		rc = "the cluster's default"
	}
	names := []string{"memory", "cpu", "tmp", "nofile"}
	how := "pod resource limits (kubelet cgroups), nofile by the agent (RLIMIT_NOFILE of every command)"
	if b.cfg.PodPidsLimit > 0 {
		names = append(names, "pids")
		how += fmt.Sprintf(", pids by the nodes' kubelet podPidsLimit %d (node-wide, declared by K8S_POD_PIDS_LIMIT)", b.cfg.PodPidsLimit)
	}
	switch b.cfg.NetworkPolicy {
	case NetworkPolicyEnforced:
		how += ", network: a default-deny NetworkPolicy per sandbox (enforced, declared by K8S_NETWORK_POLICY)"
	case NetworkPolicyUnenforced:
		how += ", network: not isolated (K8S_NETWORK_POLICY=unenforced)"
	}
	return names, how + ", runtime class " + rc + ", namespace " + b.cfg.Namespace
}

// Available checks that the operator declared the enforcement of the
// sandboxes' NetworkPolicy, that the apiserver answers and that the
// namespace exists.
func (b *Backend) Available(ctx context.Context) error {
	if err := b.networkPolicyErr(); err != nil {
		return err
	}
	if _, err := b.cs.CoreV1().Namespaces().Get(ctx, b.cfg.Namespace, metav1.GetOptions{}); err != nil {
		// A Role limited to one namespace may not read namespaces: a list
		// of pods there proves the cluster answers and the Role works.
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("kubernetes: namespace %s: %w", b.cfg.Namespace, err)
		}
		if _, err := b.cs.CoreV1().Pods(b.cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return fmt.Errorf("kubernetes: list pods in %s: %w", b.cfg.Namespace, err)
		}
	}
	return nil
}

// names returns the object names of container id: the pod's, the claim's
// (and the policy's, which is the pod's) and the hash label.
func (b *Backend) names(id string) (pod, claim, hash string) {
	sum := sha256.Sum256([]byte(b.cfg.Instance + "\x00" + id))
	hash = hex.EncodeToString(sum[:])[:20]
	inst := labelSafe(b.cfg.Instance)
	if len(inst) > 20 {
		inst = inst[:20]
	}
	pod = strings.Trim("tb-"+inst, "-") + "-" + hash
	return pod, pod + "-files", hash
}

// volumeName is the PersistentVolume of a claim in HostPathVolumes mode:
// cluster-wide, so it names the namespace too.
func (b *Backend) volumeName(id string) string {
	sum := sha256.Sum256([]byte(b.cfg.Namespace + "\x00" + b.cfg.Instance + "\x00" + id))
	return "tb-pv-" + hex.EncodeToString(sum[:])[:24]
}

// labelSafe lowercases s and keeps [a-z0-9-].
func labelSafe(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
	}
	return sb.String()
}

func (b *Backend) labels(id string) map[string]string {
	_, _, hash := b.names(id)
	return map[string]string{LabelManaged: "true", LabelInstance: labelSafe(b.cfg.Instance), LabelContainer: hash}
}

func (b *Backend) selector() string {
	return LabelManaged + "=true," + LabelInstance + "=" + labelSafe(b.cfg.Instance)
}

// Ensure boots the sandbox for spec.ID unless it is running: the claim and
// the policy (kept from an earlier boot, or made), then the pod.
func (b *Backend) Ensure(ctx context.Context, spec sandbox.Spec) error {
	if err := b.boxes.Ensure(ctx, spec, nil, b.boot); err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	return nil
}

// Agent returns the sandbox's agent connection.
func (bx *box) Agent() boxes.Agent { return bx.agent }

// Kill ends the attach stream (and the files sidecar's); the pod stays
// until Stop deletes it.
func (bx *box) Kill() { bx.stop() }

// Done is closed when the attach stream has ended.
func (bx *box) Done() <-chan struct{} { return bx.done }

// StartedAt returns when the pod started.
func (bx *box) StartedAt() time.Time { return bx.startedAt }

// OOMKills is not counted on the host: the agent in the pod tells a
// command's memory kill (Config.OOMEvents).
func (bx *box) OOMKills() (int64, bool) { return 0, false }

// CPUTime is not counted: the pods' control groups are the kubelet's, on
// the nodes.
func (bx *box) CPUTime(context.Context) (time.Duration, error) {
	return 0, fmt.Errorf("%w: the pods' control groups are on the nodes", sandbox.ErrUnsupported)
}

// Why says why the pod went, from the apiserver.
func (bx *box) Why() string { return strings.TrimPrefix(bx.b.deathReason(bx), ": ") }

// missing reports whether neither a pod nor a claim of id is left. When
// the pod goes away under a command (deleted, evicted, stopped), the next
// Ensure re-creates it over the same claim.
func (b *Backend) missing(ctx context.Context, id string) bool {
	st, err := b.Status(ctx, id)
	return err == nil && st.State == sandbox.StateMissing
}

// Stop deletes the sandbox's pod and waits for it to be gone; the claim
// (the files) and the policy stay.
func (b *Backend) Stop(ctx context.Context, id string) error {
	defer b.boxes.Lock(id)()
	if bx, _ := b.boxes.Take(id); bx != nil {
		bx.stop()
		b.log.Info("sandbox stopped", "id", id, "pod", bx.pod)
	}
	pod, _, _ := b.names(id)
	if err := b.deletePod(ctx, pod); err != nil {
		return fmt.Errorf("kubernetes: stop %s: %w", id, err)
	}
	return nil
}

// Remove deletes the pod, the claim (and its volume), and the policy.
func (b *Backend) Remove(ctx context.Context, id string) error {
	if err := b.Stop(ctx, id); err != nil {
		return err
	}
	defer b.boxes.Lock(id)()
	if err := b.deleteObjects(ctx, id); err != nil {
		return fmt.Errorf("kubernetes: remove %s: %w", id, err)
	}
	b.boxes.Forget(id)
	return nil
}

// Status reports running for a pod this backend holds, stopped for a pod it
// does not hold or a claim without a pod, and missing otherwise.
func (b *Backend) Status(ctx context.Context, id string) (sandbox.Status, error) {
	if st, _ := b.Ops.Status(ctx, id); st.State == sandbox.StateRunning {
		return st, nil
	}
	podName, claim, _ := b.names(id)
	p, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err == nil {
		st := sandbox.Status{State: sandbox.StateStopped}
		if p.Status.StartTime != nil {
			st.StartedAt = p.Status.StartTime.Time
		}
		return st, nil
	}
	if !apierrors.IsNotFound(err) {
		return sandbox.Status{}, fmt.Errorf("kubernetes: status %s: %w", id, err)
	}
	// A claim being deleted (held a moment by the pvc-protection
	// finalizer) is already gone for the sandbox.
	if pvc, err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Get(ctx, claim, metav1.GetOptions{}); err == nil && pvc.DeletionTimestamp == nil {
		return sandbox.Status{State: sandbox.StateStopped}, nil
	} else if err != nil && !apierrors.IsNotFound(err) {
		return sandbox.Status{}, fmt.Errorf("kubernetes: status %s: %w", id, err)
	}
	return sandbox.Status{State: sandbox.StateMissing}, nil
}

// Reconcile finds this instance's pods (and claims without a pod) that this
// process does not hold and does with each what decide says: adopt a
// running pod (kept when its agent answers over a new attach stream, else
// deleted), delete it (Stop keeps its claim, the files of an idle
// container; Drop also deletes the claim and policy: no live record claims
// its files), or leave it. Objects without this instance's
// labels are never touched.
func (b *Backend) Reconcile(ctx context.Context, decide func(id string) sandbox.Verdict) (adopted, removed []string, err error) {
	pods, err := b.cs.CoreV1().Pods(b.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: b.selector()})
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes: reconcile: %w", err)
	}
	seen := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		id := p.Annotations[AnnotationContainer]
		seen[id] = true
		v := b.boxes.Verdict(id, decide)
		switch {
		case v == sandbox.Leave:
			continue
		case v == sandbox.Adopt && p.DeletionTimestamp == nil && b.adopt(ctx, id, p):
			adopted = append(adopted, id)
			continue
		}
		if err := b.deletePod(ctx, p.Name); err != nil {
			return adopted, removed, fmt.Errorf("kubernetes: reconcile: %w", err)
		}
		if v == sandbox.Drop && id != "" {
			if err := b.deleteObjects(ctx, id); err != nil {
				return adopted, removed, fmt.Errorf("kubernetes: reconcile: %w", err)
			}
		}
		removed = append(removed, id)
	}
	// Claims of stopped sandboxes whose containers are gone.
	claims, err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: b.selector()})
	if err != nil {
		return adopted, removed, fmt.Errorf("kubernetes: reconcile: %w", err)
	}
	for _, c := range claims.Items {
		id := c.Annotations[AnnotationContainer]
		if id == "" || seen[id] || b.boxes.Get(id) != nil || decide(id) != sandbox.Drop {
			continue
		}
		if err := b.deleteObjects(ctx, id); err != nil {
			return adopted, removed, fmt.Errorf("kubernetes: reconcile: %w", err)
		}
		removed = append(removed, id)
	}
	if len(adopted)+len(removed) > 0 {
		b.log.Info("sandboxes reconciled", "adopted", len(adopted), "removed", len(removed))
	}
	return adopted, removed, nil
}

// adopt attaches to a running pod and keeps it when its agent answers.
func (b *Backend) adopt(ctx context.Context, id string, p *corev1.Pod) bool {
	defer b.boxes.Lock(id)()
	if b.boxes.Get(id) != nil {
		return true
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != b.cfg.Image {
		return false
	}
	if !b.cfg.HostPathVolumes && !hasContainer(p, containerFiles) {
		return false // a pod from before the files sidecar: booted afresh
	}
	bx, err := b.attach(id, p)
	if err != nil {
		b.log.Warn("sandbox not adopted", "id", id, "err", err)
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := bx.agent.Ping(pctx); err != nil {
		b.log.Warn("sandbox not adopted", "id", id, "err", err)
		bx.stop()
		return false
	}
	b.boxes.Put(id, bx)
	return true
}

// hasContainer reports whether the pod's spec has the named container.
func hasContainer(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// deletePod deletes a pod and waits until it is gone (a re-created pod of
// the same name must not meet the old one, nor two pods share the files).
func (b *Backend) deletePod(ctx context.Context, name string) error {
	grace := int64(1)
	pods := b.cs.CoreV1().Pods(b.cfg.Namespace)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if _, err := pods.Get(wctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("pod %s not gone: %w", name, wctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteObjects deletes id's claim, its volume (HostPathVolumes) and policy.
func (b *Backend) deleteObjects(ctx context.Context, id string) error {
	pod, claim, _ := b.names(id)
	var errs []error
	if err := b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete policy: %w", err))
	}
	if err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete claim: %w", err))
	}
	if b.cfg.HostPathVolumes {
		// Retained: the host folders are the caller's (hostdirs).
		if err := b.cs.CoreV1().PersistentVolumes().Delete(ctx, b.volumeName(id), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete volume: %w", err))
		}
	}
	return errors.Join(errs...)
}

// deathReason describes why a sandbox's pod went away.
func (b *Backend) deathReason(bx *box) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := b.cs.CoreV1().Pods(b.cfg.Namespace).Get(ctx, bx.pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && string(p.UID) != bx.uid) {
		return ": pod deleted"
	}
	if err != nil {
		return ""
	}
	if p.DeletionTimestamp != nil {
		return ": pod being deleted"
	}
	var parts []string
	if p.Status.Reason != "" {
		parts = append(parts, p.Status.Reason)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			if t.Reason == "OOMKilled" {
				parts = append(parts, "out of memory")
			}
			parts = append(parts, fmt.Sprintf("exit code %d", t.ExitCode))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": pod ended (" + strings.Join(parts, ", ") + ")"
}

var _ sandbox.Backend = (*Backend)(nil)

// sandboxUID and sandboxGID are the ids of the sandbox user, the image's
// agent user.
var (
	sandboxUID = int64(hostdirs.SandboxUID)
	sandboxGID = int64(hostdirs.SandboxGID)
)
