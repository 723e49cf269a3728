// Package k8stest holds helpers of the kubernetes backend's tests on the
// test cluster of scripts/k8s-up.sh.
package k8stest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Provisioner makes a StorageClass of its own and, until the test ends,
// provisions each of its claims in namespace ns the way a local-path
// provisioner does: a fresh folder (mode 0777, as such provisioners make
// them; a node-local folder takes no fsGroup) on this machine, which is the
// cluster's only node, as a hostPath PersistentVolume bound to the claim.
// The test cluster has no dynamic provisioner, and storage-class mode
// (K8S_HOST_PATH_VOLUMES=false) needs one; the backend sees only the claim,
// never the folder. It returns the class name. Volumes are deleted when the
// test ends.
func Provisioner(t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	class := "tb-local-" + ns
	immediate := storagev1.VolumeBindingImmediate
	del := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: class},
		Provisioner:       "threadbox.test/local-dir",
		ReclaimPolicy:     &del,
		VolumeBindingMode: &immediate,
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		cancel()
		t.Fatalf("create storage class: %v", err)
	}
	root := t.TempDir()
	var made []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			claims, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, pvc := range claims.Items {
					if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != class || pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
						continue
					}
					if name, ok := provision(ctx, t, cs, root, class, &pvc); ok {
						made = append(made, name)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		for _, name := range made {
			_ = cs.CoreV1().PersistentVolumes().Delete(dctx, name, metav1.DeleteOptions{})
		}
		_ = cs.StorageV1().StorageClasses().Delete(dctx, class, metav1.DeleteOptions{})
	})
	return class
}

// provision makes the folder and the volume of one claim.
func provision(ctx context.Context, t *testing.T, cs kubernetes.Interface, root, class string, pvc *corev1.PersistentVolumeClaim) (string, bool) {
	name := "pv-" + string(pvc.UID)
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Errorf("provisioner: %v", err)
		return "", false
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Errorf("provisioner: %v", err)
		return "", false
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		if ctx.Err() == nil {
			t.Errorf("provisioner: create volume: %v", err)
		}
		return "", false
	}
	return name, true
}
