package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"threadbox/domain/sandbox"
	"threadbox/infra/fsroot"
	"threadbox/infra/sandbox/agent/fileop"
)

// runFile performs one file operation of infra/sandbox/agent/fileop over
// the folders mounted at their sandbox paths and returns the exit
// status: `threadbox-agent file '<request JSON>'`. The kubernetes backend's
// files sidecar runs it; its host reads the answer from stdout.
func runFile(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: threadbox-agent file '<request JSON>'")
		return 2
	}
	req, err := fileop.ParseRequest(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dirs := fsroot.Dirs{Workspace: sandbox.WorkspaceDir, Uploads: sandbox.UploadsDir, Outputs: sandbox.OutputsDir, Skills: sandbox.SkillsDir}
	fs := fsroot.NewContainers(func(string) fsroot.Dirs { return dirs }, fsroot.Options{})
	if err := fileop.Serve(ctx, fs, sandbox.SkillsDir, req, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
