// Command k8sbuild is the single-node test cluster's Kubernetes programs —
// kube-apiserver, kube-controller-manager, kube-scheduler and kubelet — linked
// as one binary that runs the program its name says (scripts/k8s-build.sh
// links the four names to it). One link instead of four is the larger part
// of what a cold build of the cluster costs after compiling. It is never
// imported by threadbox.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // time zone support in CronJob, as the upstream programs have it

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	var command *cobra.Command
	switch name := filepath.Base(os.Args[0]); name {
	case "kube-apiserver":
		command = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		command = controllermanager.NewControllerManagerCommand()
	case "kube-scheduler":
		command = scheduler.NewSchedulerCommand()
	case "kubelet":
		command = kubelet.NewKubeletCommand(context.Background())
	default:
		fmt.Fprintf(os.Stderr, "%s: run as kube-apiserver, kube-controller-manager, kube-scheduler or kubelet\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(command))
}
