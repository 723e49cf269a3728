package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
	"threadbox/infra/sandbox/boxes"
)

// Volume names of a sandbox pod.
const (
	volFiles = "files"
	volAgent = "agent"
	volTmp   = "tmp"
)

// defaultMounts are a Spec's mounts when it names none: the sandbox's
// folders as sub-folders of the claim.
var defaultMounts = []sandbox.Mount{
	{Source: "workspace", Target: sandbox.WorkspaceDir},
	{Source: "uploads", Target: sandbox.UploadsDir, ReadOnly: true},
	{Source: "outputs", Target: sandbox.OutputsDir},
	{Source: "skills", Target: sandbox.SkillsDir, ReadOnly: true},
}

// subPaths maps the spec's mounts onto sub-folders of the claim: with
// HostPathVolumes the claim's volume is the mounts' common host folder and
// each mount its path below it; otherwise each mount is a sub-folder named
// after its host folder (or the default folder names).
func (b *Backend) subPaths(spec sandbox.Spec) (root string, mounts []sandbox.Mount, err error) {
	if len(spec.Mounts) == 0 {
		if b.cfg.HostPathVolumes {
			return "", nil, errors.New("host path volumes need the spec's host folders (mounts)")
		}
		return "", defaultMounts, nil
	}
	if !b.cfg.HostPathVolumes {
		for _, m := range spec.Mounts {
			mounts = append(mounts, sandbox.Mount{Source: filepath.Base(m.Source), Target: m.Target, ReadOnly: m.ReadOnly})
		}
		return "", mounts, nil
	}
	root = filepath.Dir(spec.Mounts[0].Source)
	for _, m := range spec.Mounts[1:] {
		for !strings.HasPrefix(m.Source, root+"/") && root != "/" {
			root = filepath.Dir(root)
		}
	}
	for _, m := range spec.Mounts {
		rel, err := filepath.Rel(root, m.Source)
		if err != nil || strings.HasPrefix(rel, "..") {
			return "", nil, fmt.Errorf("mount %s outside %s", m.Source, root)
		}
		mounts = append(mounts, sandbox.Mount{Source: rel, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return root, mounts, nil
}

func (b *Backend) meta(id, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: b.labels(id), Annotations: map[string]string{AnnotationContainer: id}}
}

// ensureObjects makes id's claim (and its volume) and policy unless they
// exist.
func (b *Backend) ensureObjects(ctx context.Context, spec sandbox.Spec, hostRoot string, l sandbox.Limits) error {
	pod, claim, _ := b.names(spec.ID)
	size := resource.NewQuantity(l.DiskBytes, resource.BinarySI)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: b.meta(spec.ID, claim),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *size}},
		},
	}
	if b.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = &b.cfg.StorageClass
	}
	if b.cfg.HostPathVolumes {
		empty, pvName := "", b.volumeName(spec.ID)
		pvc.Spec.StorageClassName = &empty
		pvc.Spec.VolumeName = pvName
		dirType := corev1.HostPathDirectory
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pvName, Labels: b.labels(spec.ID), Annotations: map[string]string{AnnotationContainer: spec.ID}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *size},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              "",
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: b.cfg.Namespace, Name: claim},
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostRoot, Type: &dirType}},
			},
		}
		if _, err := b.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create volume: %w", err)
		}
	}
	if _, err := b.cs.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create claim: %w", err)
	}
	// Default deny, both ways: the sandbox reaches nothing and nothing
	// reaches it; threadbox talks to it through the apiserver. Enforced
	// only where the cluster runs a policy engine.
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: b.meta(spec.ID, pod),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: b.labels(spec.ID)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if _, err := b.cs.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create network policy: %w", err)
	}
	return nil
}

// podSpec builds the hardened pod of a sandbox.
func (b *Backend) podSpec(spec sandbox.Spec, mounts []sandbox.Mount, l sandbox.Limits) *corev1.Pod {
	podName, claim, _ := b.names(spec.ID)
	no, yes := false, true
	hardened := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			RunAsUser: &sandboxUID, RunAsGroup: &sandboxGID, RunAsNonRoot: &yes,
			AllowPrivilegeEscalation: &no, Privileged: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	var env []corev1.EnvVar
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	env = append(env, corev1.EnvVar{Name: "THREADBOX_AGENT_OOM_EVENTS", Value: b.cfg.OOMEvents})
	if l.NoFile > 0 {
		// No pod field bounds open files: the agent lowers its own
		// RLIMIT_NOFILE, which every command inherits.
		env = append(env, corev1.EnvVar{Name: "THREADBOX_AGENT_NOFILE", Value: strconv.FormatInt(l.NoFile, 10)})
	}
	vm := []corev1.VolumeMount{
		{Name: volAgent, MountPath: filepath.Dir(sandbox.AgentPath), ReadOnly: true},
		{Name: volTmp, MountPath: "/tmp"},
	}
	for _, m := range mounts {
		vm = append(vm, corev1.VolumeMount{Name: volFiles, MountPath: m.Target, SubPath: m.Source, ReadOnly: m.ReadOnly})
	}
	tmp := resource.NewQuantity(l.TmpBytes, resource.BinarySI)
	limits := corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(l.MemoryBytes, resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(l.CPUs*1000), resource.DecimalSI),
	}
	// Small requests: a sandbox is idle most of the time; the limits bound it.
	requests := corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse("64Mi"),
		corev1.ResourceCPU:    resource.MustParse("50m"),
	}
	var fsGroup *int64
	if !b.cfg.HostPathVolumes {
		fsGroup = &sandboxGID // a fresh claim's folders become the sandbox user's
	}
	var rc *string
	if b.cfg.RuntimeClass != "" {
		rc = &b.cfg.RuntimeClass
	}
	grace := int64(1)
	containers := []corev1.Container{{
		Name:            containerSandbox,
		Image:           b.cfg.Image,
		ImagePullPolicy: b.cfg.PullPolicy,
		Command:         []string{sandbox.AgentPath},
		WorkingDir:      sandbox.WorkspaceDir,
		Env:             env,
		Stdin:           true,
		StdinOnce:       false,
		TTY:             false,
		VolumeMounts:    vm,
		SecurityContext: hardened(),
		Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
	}}
	if !b.cfg.HostPathVolumes {
		// The files sidecar (files.go): the same folders, all writable,
		// in a container of its own that the sandbox's code cannot enter;
		// threadbox's file operations run there.
		fm := make([]corev1.VolumeMount, 0, len(mounts))
		for _, m := range mounts {
			fm = append(fm, corev1.VolumeMount{Name: volFiles, MountPath: m.Target, SubPath: m.Source})
		}
		containers = append(containers, corev1.Container{
			Name:            containerFiles,
			Image:           b.cfg.AgentImage,
			ImagePullPolicy: b.cfg.PullPolicy,
			Command:         []string{FilesAgentPath},
			Env:             []corev1.EnvVar{{Name: "THREADBOX_AGENT_OOM_EVENTS", Value: b.cfg.OOMEvents}},
			Stdin:           true,
			VolumeMounts:    fm,
			SecurityContext: hardened(),
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
			},
		})
	}
	pod := &corev1.Pod{
		ObjectMeta: b.meta(spec.ID, podName),
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			RuntimeClassName:              rc,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &sandboxUID, RunAsGroup: &sandboxGID, RunAsNonRoot: &yes, FSGroup: fsGroup,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name:            containerAgent,
				Image:           b.cfg.AgentImage,
				ImagePullPolicy: b.cfg.PullPolicy,
				Command:         []string{"/install", "/threadbox-agent", sandbox.AgentPath},
				VolumeMounts:    []corev1.VolumeMount{{Name: volAgent, MountPath: filepath.Dir(sandbox.AgentPath)}},
				SecurityContext: hardened(),
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("200m")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
				},
			}},
			Containers: containers,
			Volumes: []corev1.Volume{
				{Name: volFiles, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}},
				{Name: volAgent, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
			},
		},
	}
	b.trustPod(pod)
	return pod
}

// boot makes the claim and policy unless they exist, creates the pod, waits
// for its sandbox container to run, attaches and pings the agent.
func (b *Backend) boot(ctx context.Context, spec sandbox.Spec) (*box, error) {
	if err := b.networkPolicyErr(); err != nil {
		return nil, err
	}
	l := spec.Limits.Or(b.cfg.Limits)
	root, mounts, err := b.subPaths(spec)
	if err != nil {
		return nil, err
	}
	// Creation is not cut short by a caller that goes (a stopped turn).
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer ccancel()
	if err := b.ensureObjects(cctx, spec, root, l); err != nil {
		return nil, err
	}
	if err := b.ensureTrust(cctx); err != nil {
		return nil, err
	}
	pods := b.cs.CoreV1().Pods(b.cfg.Namespace)
	want := b.podSpec(spec, mounts, l)
	// A pod of this name that this process does not hold (ended, or
	// left behind) is replaced.
	if err := b.deletePod(cctx, want.Name); err != nil {
		return nil, err
	}
	created, err := pods.Create(cctx, want, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	fail := func(err error) (*box, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = b.deletePod(dctx, created.Name)
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, b.cfg.BootTimeout)
	defer cancel()
	p, err := b.waitRunning(bctx, created.Name, string(created.UID))
	if err != nil {
		return fail(err)
	}
	bx, err := attachAgent(bctx, attachTry, b.log.With("id", spec.ID, "pod", p.Name), func() (*box, error) { return b.attach(spec.ID, p) })
	if err != nil {
		if bx != nil {
			err = fmt.Errorf("%w%s", err, b.deathReason(bx))
		}
		return fail(err)
	}
	b.log.Info("sandbox booted", "id", spec.ID, "pod", p.Name, "runtimeClass", b.cfg.RuntimeClass)
	return bx, nil
}

// attachTry bounds one attach stream's first answer. The agent answers
// in milliseconds once its container runs; an API server or kubelet
// under load has been seen to open an attach stream that carries
// nothing, and a second stream then works.
const attachTry = 15 * time.Second

// attachAgent opens a stream with open and pings the agent through it.
// A stream that gives no answer within try is closed and another one
// opened, until ctx ends. A stream that ends, or an agent that fails
// the ping, fails at once. On failure the last box is returned, closed,
// for its death reason.
func attachAgent(ctx context.Context, try time.Duration, log *slog.Logger, open func() (*box, error)) (*box, error) {
	for attempt := 1; ; attempt++ {
		bx, err := open()
		if err != nil {
			return nil, err
		}
		err = boxes.Handshake(ctx, try, bx.agent, bx.done)
		if err == nil {
			return bx, nil
		}
		bx.stop()
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return bx, err
		}
		log.Warn("sandbox attach stream gave no answer; attaching again", "attempt", attempt, "after", try)
	}
}

// waitRunning polls the pod until its containers run, failing
// early on a pod that ended or a container that cannot start.
func (b *Backend) waitRunning(ctx context.Context, name, uid string) (*corev1.Pod, error) {
	pods := b.cs.CoreV1().Pods(b.cfg.Namespace)
	var last string
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("pod %s not running (%s): %w", name, last, ctx.Err())
		case err != nil:
			return nil, fmt.Errorf("get pod %s: %w", name, err)
		case string(p.UID) != uid || p.DeletionTimestamp != nil:
			return nil, fmt.Errorf("pod %s deleted while booting", name)
		case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
			return nil, fmt.Errorf("pod %s ended: %s %s", name, p.Status.Phase, p.Status.Message)
		}
		last = string(p.Status.Phase)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				last = cs.Name + ": " + w.Reason + " " + w.Message
				switch w.Reason {
				case "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
					return nil, fmt.Errorf("pod %s: %s", name, last)
				}
			}
			if t := cs.State.Terminated; t != nil && (cs.Name == containerSandbox || cs.Name == containerFiles) {
				return nil, fmt.Errorf("pod %s: %s container ended: %s exit %d", name, cs.Name, t.Reason, t.ExitCode)
			}
		}
		running := 0
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil && (cs.Name == containerSandbox || cs.Name == containerFiles) {
				running++
			}
		}
		// The sandbox container, and the files sidecar where there is one.
		if running > 0 && running == len(p.Spec.Containers) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s not running (%s): %w", name, last, ctx.Err())
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// attach opens the sandbox container's attach stream (websocket, falling
// back to SPDY) and wraps it in an agent client. The stream lives until
// stop or until the pod goes.
func (b *Backend) attach(id string, p *corev1.Pod) (*box, error) {
	bx := &box{b: b, id: id, pod: p.Name, uid: string(p.UID)}
	if p.Status.StartTime != nil {
		bx.startedAt = p.Status.StartTime.Time
	} else {
		bx.startedAt = time.Now()
	}
	stop, done, err := b.openStream(id, p.Name, containerSandbox, func(rw io.ReadWriteCloser) { bx.agent = boxes.NewAgent(rw) })
	if err != nil {
		return nil, err
	}
	bx.done = done
	bx.stop = func() {
		stop()
		bx.stopFiles()
	}
	return bx, nil
}

// openStream opens the attach stream of one container of pod podName and
// hands it to wrap; stop ends the stream and done is closed when it has
// ended.
func (b *Backend) openStream(id, podName, container string, wrap func(io.ReadWriteCloser)) (stop func(), done chan struct{}, err error) {
	req := b.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(b.cfg.Namespace).Name(podName).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.rest, "GET", req.URL().String())
	if err != nil {
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.rest, "POST", req.URL())
	if err != nil {
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	stop = func() {
		cancel()
		inR.CloseWithError(io.EOF)
		inW.Close()
		outR.Close()
	}
	wrap(agent.NewConn(outR, inW, func() error { stop(); return nil }))
	go func() {
		err := exec.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: boxes.NewLogTail(b.log, "agent", id)})
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(fmt.Errorf("sandbox stream ended: %w", err))
		if sctx.Err() == nil {
			b.log.Info("sandbox attach stream ended", "id", id, "pod", podName, "container", container, "err", err)
		}
		cancel()
		close(done)
	}()
	return stop, done, nil
}
