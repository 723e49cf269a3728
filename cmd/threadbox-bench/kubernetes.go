package main

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	k8s "threadbox/infra/sandbox/kubernetes"
)

// benchKubernetes measures the kubernetes backend beside docker's rows on
// the cluster of kubeconfig (scripts/k8s-up.sh's, THREADBOX_K8S_KUBECONFIG):
// a warm `true` through the agent over the pod's attach stream, and a new
// container's first command (claim, policy and pod made, agent answered).
// Everything runs in a namespace of its own, deleted at the end.
func benchKubernetes(ctx context.Context, kubeconfig string, n, nCold int) ([]benchRow, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("tb-bench-%d", os.Getpid())
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer func() {
		dctx := context.WithoutCancel(ctx)
		zero := int64(0)
		_ = cs.CoreV1().Pods(ns).DeleteCollection(dctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = cs.CoreV1().Namespaces().Delete(dctx, ns, metav1.DeleteOptions{})
	}()
	for i := 0; ; i++ {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if i > 100 {
			return nil, fmt.Errorf("no default service account in %s: %w", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, err := os.MkdirTemp("", "threadbox-bench-k8s-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(data)
	dirs := hostdirs.New(data, hostdirs.Options{Quota: hostdirs.QuotaNone})
	oom := k8s.DefaultOOMEvents
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.oom_control"); err == nil {
		oom = "/sys/fs/cgroup/memory/memory.oom_control"
	}
	// The test cluster's pods have no network but loopback, and no policy
	// engine: nothing enforces the sandboxes' NetworkPolicy.
	be, err := k8s.New(k8s.Config{
		Settings: boxes.Settings{Instance: "bench"}, Kubeconfig: kubeconfig, Namespace: ns, HostPathVolumes: true, PullPolicy: corev1.PullNever, OOMEvents: oom,
		NetworkPolicy: k8s.NetworkPolicyUnenforced})
	if err != nil {
		return nil, err
	}
	defer be.Close()
	if err := be.Available(ctx); err != nil {
		return nil, err
	}
	boot := func(id string) error {
		d, err := dirs.Prepare(ctx, id)
		if err != nil {
			return err
		}
		return be.Ensure(ctx, sandbox.Spec{ID: id, Mounts: d.Mounts()})
	}
	trueCmd := sandbox.Command{Args: []string{"true"}}
	run := func(id string) error {
		res, err := be.Exec(ctx, id, trueCmd)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		return err
	}
	const id = "bench-k8s"
	if err := boot(id); err != nil {
		return nil, err
	}
	defer be.Remove(context.WithoutCancel(ctx), id)
	for range 5 {
		if err := run(id); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: kubernetes round trips (%d)\n", n)
	warm, err := measure(n, func() error { return run(id) })
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: kubernetes new containers (%d)\n", nCold)
	var cold []string
	boots, err := measure(nCold, func() error {
		cid := fmt.Sprintf("cold-k8s-%d", time.Now().UnixNano())
		cold = append(cold, cid)
		if err := boot(cid); err != nil {
			return err
		}
		return run(cid)
	}, func() {
		for _, cid := range cold {
			be.Remove(context.WithoutCancel(ctx), cid)
		}
		cold = cold[:0]
	})
	if err != nil {
		return nil, err
	}
	return []benchRow{
		{"kubernetes: true (warm, attach stream)", warm},
		{"kubernetes: new container to first result", boots},
	}, nil
}
