package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/local"
)

// benchRow is one measured row of the table.
type benchRow struct {
	name string
	d    []time.Duration
}

// defaultRootFS is the local backend's root filesystem as
// sandbox/build-offline.sh leaves it, or "" when there is none.
func defaultRootFS() string { return local.FindRootFS(os.Getenv) }

// benchLocal measures the local (bubblewrap) backend beside docker's rows:
// a warm `true` through the jail's agent and a cold boot to the first
// command's result.
func benchLocal(ctx context.Context, rootfs, agentBin string, n, nCold int) ([]benchRow, error) {
	data, err := os.MkdirTemp("", "threadbox-bench-local-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(data)
	// The jail runs as an unprivileged host user that must reach its folders.
	if err := os.Chmod(data, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Dir(agentBin), 0o755); err != nil && os.Geteuid() == 0 {
		return nil, err
	}
	be, err := local.New(local.Config{
		Settings: boxes.Settings{Instance: fmt.Sprintf("bench%d", os.Getpid())},
		RootFS:   rootfs, AgentBin: agentBin,
		Dirs:    hostdirs.New(data, hostdirs.Options{Quota: hostdirs.QuotaNone}),
		PoolDir: filepath.Join(data, "pool"),
	})
	if err != nil {
		return nil, err
	}
	defer be.Close()
	if err := be.Available(ctx); err != nil {
		return nil, err
	}
	const id = "bench-local"
	if err := be.Ensure(ctx, sandbox.Spec{ID: id}); err != nil {
		return nil, err
	}
	defer be.Remove(context.WithoutCancel(ctx), id)
	trueCmd := sandbox.Command{Args: []string{"true"}}
	localTrue := func() error {
		res, err := be.Exec(ctx, id, trueCmd)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		return err
	}
	for range 5 {
		if err := localTrue(); err != nil {
			return nil, err
		}
	}
	mode, _ := be.LimitMode()
	fmt.Fprintf(os.Stderr, "bench: local round trips (%d, limits by %s)\n", n, mode)
	warm, err := measure(n, localTrue)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: local cold boots (%d)\n", nCold)
	var cold []string
	boots, err := measure(nCold, func() error {
		cid := fmt.Sprintf("cold-local-%d", time.Now().UnixNano())
		cold = append(cold, cid)
		if err := be.Ensure(ctx, sandbox.Spec{ID: cid}); err != nil {
			return err
		}
		_, err := be.Exec(ctx, cid, trueCmd)
		return err
	}, func() {
		for _, cid := range cold {
			be.Remove(context.WithoutCancel(ctx), cid)
		}
		cold = cold[:0]
	})
	if err != nil {
		return nil, err
	}
	rows := []benchRow{
		{"local: true (warm)", warm},
		{"local: cold boot to first result", boots},
	}
	fmt.Fprintf(os.Stderr, "bench: local warm pool claims (%d)\n", nCold)
	if claims, err := claimFirst(ctx, be, nCold, trueCmd); err == nil {
		rows = append(rows, benchRow{"local: warm pool claim to first result", claims})
	} else {
		fmt.Fprintf(os.Stderr, "bench: local warm pool: %v\n", err)
	}
	return rows, nil
}
