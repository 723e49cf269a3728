package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"threadbox/infra/sandbox/boxes"
)

// The trust folder (Settings.TrustDir: the install's egress CA, a bundle of
// the system's roots with it, curl's .curlrc) reaches pods as a ConfigMap of
// the instance in the namespace, mounted read-only at boxes.TrustPath, with
// boxes.TrustEnv set, as the other backends bind the folder itself.

// volTrust is the pod volume of the trust ConfigMap.
const volTrust = "trust"

// trustName is the ConfigMap of this instance's trust folder.
func (b *Backend) trustName() string {
	return strings.Trim("threadbox-trust-"+labelSafe(b.cfg.Instance), "-")
}

// ensureTrust writes the trust folder's files into the instance's
// ConfigMap, created or replaced, once per process (again after a
// failure). Without a trust folder it does nothing.
func (b *Backend) ensureTrust(ctx context.Context) error {
	if b.cfg.TrustDir == "" {
		return nil
	}
	b.trustMu.Lock()
	defer b.trustMu.Unlock()
	if b.trustDone {
		return nil
	}
	entries, err := os.ReadDir(b.cfg.TrustDir)
	if err != nil {
		return fmt.Errorf("trust folder: %w", err)
	}
	data := map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		content, err := os.ReadFile(filepath.Join(b.cfg.TrustDir, e.Name()))
		if err != nil {
			return fmt.Errorf("trust folder: %w", err)
		}
		data[e.Name()] = string(content)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: b.trustName(), Namespace: b.cfg.Namespace,
			Labels: map[string]string{LabelManaged: "true", LabelInstance: labelSafe(b.cfg.Instance)}},
		Data: data,
	}
	maps := b.cs.CoreV1().ConfigMaps(b.cfg.Namespace)
	_, err = maps.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = maps.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("trust config map: %w", err)
	}
	b.trustDone = true
	return nil
}

// trustPod mounts the trust ConfigMap into the pod's sandbox container
// and sets the variables that point the tools at it, when there is a
// trust folder: the last step of podSpec.
func (b *Backend) trustPod(p *corev1.Pod) {
	if b.cfg.TrustDir == "" {
		return
	}
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: volTrust, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: b.trustName()}},
	}})
	mount := corev1.VolumeMount{Name: volTrust, MountPath: boxes.TrustPath, ReadOnly: true}
	// The sandbox container sees the agent's volume read-only at the
	// trust folder's parent, where no mount point can be made: the init
	// container, which sees it writable, mounts the trust folder too,
	// and so makes its mount point there.
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		c.VolumeMounts = append(c.VolumeMounts, mount)
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.Name != containerSandbox {
			continue
		}
		c.VolumeMounts = append(c.VolumeMounts, mount)
		for _, kv := range boxes.TrustEnv() {
			k, v, _ := strings.Cut(kv, "=")
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
		}
	}
}
