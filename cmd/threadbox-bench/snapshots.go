package main

// The snapshots section: what time travel costs a thread, in-process on
// the host folders a server keeps (infra/sandbox/hostdirs): a turn's files
// snapshot of a 100 MiB workspace (100 files of 1 MiB) after a 1 MiB
// change and after none, beside copying that 1 MiB (the floor of any
// incremental snapshot) and copying the whole workspace (a naive one); the
// storage a snapshot adds on disk; a call's change list; a rewind (the
// whole workspace restored) beside the same copy; and reverting one call's
// file. Each in one run, on the file system the bench's temporary folder
// is on.

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"threadbox/domain/snapshot"
	"threadbox/infra/sandbox/hostdirs"
)

// benchSnapshots prints the snapshots table; n rounds per row.
func benchSnapshots(ctx context.Context, n int, out io.Writer) error {
	work, err := os.MkdirTemp("", "threadbox-bench-snapshots-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	l := hostdirs.New(filepath.Join(work, "data"), hostdirs.Options{})
	d, err := l.Prepare(ctx, "ctr_bench")
	if err != nil {
		return err
	}
	const files, size = 100, 1 << 20
	buf := make([]byte, size)
	for i := range files {
		_, _ = rand.Read(buf)
		if err := os.WriteFile(filepath.Join(d.Workspace, fmt.Sprintf("f%03d.bin", i)), buf, 0o644); err != nil {
			return err
		}
	}
	const thread = "thr_bench"
	seq := 0
	prev := ""
	take := func() (snapshot.Stats, error) {
		seq++
		id := fmt.Sprintf("snp_%04d", seq)
		st, err := l.TakeSnapshot(ctx, thread, id, prev, "ctr_bench")
		prev = id
		return st, err
	}
	if _, err := take(); err != nil {
		return err
	}
	// change rewrites one file with new bytes and a later modification
	// time, as a call that overwrote it.
	tick := time.Now()
	change := func() {
		_, _ = rand.Read(buf)
		_ = os.WriteFile(filepath.Join(d.Workspace, "f000.bin"), buf, 0o644)
		tick = tick.Add(time.Second)
		_ = os.Chtimes(filepath.Join(d.Workspace, "f000.bin"), tick, tick)
	}
	var added int64
	var stored int64
	changed, err := measureSetup(n, change, func() error {
		used := usedBytes(work)
		st, err := take()
		added, stored = usedBytes(work)-used, st.Stored
		return err
	})
	if err != nil {
		return err
	}
	unchanged, err := measure(n, func() error { _, err := take(); return err })
	if err != nil {
		return err
	}
	copyDir := filepath.Join(work, "copy")
	floor, err := measureSetup(n, func() { _ = os.RemoveAll(copyDir); _ = os.MkdirAll(copyDir, 0o755) }, func() error {
		return copyFile(filepath.Join(d.Workspace, "f000.bin"), filepath.Join(copyDir, "f000.bin"))
	})
	if err != nil {
		return err
	}
	whole, err := measureSetup(n, func() { _ = os.RemoveAll(copyDir); _ = os.MkdirAll(copyDir, 0o755) }, func() error {
		for i := range files {
			name := fmt.Sprintf("f%03d.bin", i)
			if err := copyFile(filepath.Join(d.Workspace, name), filepath.Join(copyDir, name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A call's change list: the two manifests read and compared.
	change()
	base := prev
	if _, err := take(); err != nil {
		return err
	}
	after := prev
	list, err := measure(n, func() error {
		a, err := l.SnapshotManifest(ctx, thread, base)
		if err != nil {
			return err
		}
		b, err := l.SnapshotManifest(ctx, thread, after)
		if err != nil {
			return err
		}
		if c := snapshot.Diff(a, b); len(c) != 1 {
			return fmt.Errorf("the change list holds %d changes, want 1", len(c))
		}
		return nil
	})
	if err != nil {
		return err
	}
	rewind, err := measure(n, func() error { return l.RestoreSnapshot(ctx, thread, base, "ctr_bench") })
	if err != nil {
		return err
	}
	revert, err := measure(n, func() error {
		return l.RestorePaths(ctx, thread, after, "ctr_bench", []string{"workspace/f000.bin"})
	})
	if err != nil {
		return err
	}
	fsType := "unknown"
	var sf syscall.Statfs_t
	if syscall.Statfs(work, &sf) == nil {
		fsType = fmt.Sprintf("0x%x", sf.Type)
		switch sf.Type {
		case 0xef53:
			fsType = "ext4"
		case 0x58465342:
			fsType = "xfs"
		case 0x9123683e:
			fsType = "btrfs"
		case 0x01021994:
			fsType = "tmpfs"
		case 0x794c7630:
			fsType = "overlayfs"
		}
	}
	fmt.Fprintf(out, "\nSnapshots: a thread's files, 100 MiB workspace of 100 files (p50/p99 of %d, %s, %s)\n", n, fsType, work)
	fmt.Fprintf(out, "%-44s %10s %10s %14s %12s\n", "row", "p50", "p99", "vs baseline", "target")
	row := func(name string, d []time.Duration, baseline []time.Duration, target string) {
		p50, p99 := percentiles(d)
		vs := ""
		if baseline != nil {
			b50, _ := percentiles(baseline)
			vs = fmt.Sprintf("%.2fx", float64(p50)/float64(b50))
		}
		fmt.Fprintf(out, "%-44s %10s %10s %14s %12s\n", name, round(p50), round(p99), vs, target)
	}
	row("copy the changed 1 MiB file (floor)", floor, nil, "")
	row("copy the whole 100 MiB (naive snapshot)", whole, nil, "")
	row("turn snapshot, 1 MiB changed", changed, floor, "<= 50 ms")
	row("turn snapshot, nothing changed", unchanged, floor, "")
	row("a call's change list (2 manifests, diff)", list, nil, "")
	row("rewind: restore the 100 MiB", rewind, whole, "<= 1 s")
	row("revert one call's 1 MiB file", revert, floor, "")
	fmt.Fprintf(out, "storage a snapshot adds after a 1 MiB change: %s on disk (%s stored on its own, the rest hard links)\n", mib(added), mib(stored))
	return nil
}

// measureSetup is measure with setup run, untimed, before each round.
func measureSetup(n int, setup func(), fn func() error) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		setup()
		t := time.Now()
		err := fn()
		el := time.Since(t)
		if err != nil {
			return nil, err
		}
		d = append(d, el)
	}
	return d, nil
}

// copyFile copies a file's bytes to a new file.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// usedBytes is the space the file system holding dir has in use.
func usedBytes(dir string) int64 {
	var sf syscall.Statfs_t
	if syscall.Statfs(dir, &sf) != nil {
		return 0
	}
	return int64(sf.Blocks-sf.Bfree) * int64(sf.Bsize)
}
