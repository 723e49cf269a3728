package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/sandbox"
	"threadbox/domain/thread"
)

// gatedFiles is a container with one output file whose copies wait at a
// gate: the first CopyFile tells entered, then waits for open.
type gatedFiles struct {
	*outputs
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedFiles) CopyFile(ctx context.Context, _, _, p string, _ int64) (file.Info, int64, error) {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.open:
	case <-ctx.Done():
		return file.Info{}, 0, ctx.Err()
	}
	n := int64(len(g.data))
	return file.Info{Rel: p, Size: n}, n, nil
}

// TestForkIsListedOnlyWhenMade forks a thread whose file copy waits: while
// it copies, the fork is no listing's and the sweep leaves it (its lease is
// held); once made it is listed and stays. A fork whose maker is gone — a
// thread still marked as a fork being made, with no lease held, as a
// server killed mid-copy leaves it — is deleted by the sweep with its
// sandbox.
func TestForkIsListedOnlyWhenMade(t *testing.T) {
	ctx := context.Background()
	files := &gatedFiles{outputs: &outputs{data: "\x89PNG\r\n\x1a\nv1"}, entered: make(chan struct{}), open: make(chan struct{})}
	rm := &removals{}
	svc, st, p, th := setupWith(t, scriptEngine{}, func(_ *turns.Deps, d *Deps) {
		d.Container, d.Containers = files, rm
	})
	titles := func() []string {
		list, err := svc.Threads(ctx, p, "", thread.Page{Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range list {
			out = append(out, l.Title())
		}
		return out
	}

	type forked struct {
		th  thread.Thread
		err error
	}
	done := make(chan forked, 1)
	go func() {
		f, err := svc.ForkThread(ctx, p, th.ID(), "")
		done <- forked{f, err}
	}()
	<-files.entered
	forks, err := st.UnfinishedForks(ctx)
	if err != nil || len(forks) != 1 || forks[0].Title() != "Fork of T" {
		t.Fatalf("unfinished forks while copying: %v %v", forks, err)
	}
	if got := titles(); !slices.Equal(got, []string{"T"}) {
		t.Fatalf("listed while the fork copies: %q", got)
	}
	if n, err := svc.SweepUnfinishedForks(ctx); n != 0 || err != nil {
		t.Fatalf("the sweep took a fork being made: %d %v", n, err)
	}
	close(files.open)
	f := <-done
	if f.err != nil || f.th.Forking() || f.th.ID() != forks[0].ID() {
		t.Fatalf("fork: %v forking %v", f.err, f.th.Forking())
	}
	if got := titles(); !slices.Contains(got, "Fork of T") || len(got) != 2 {
		t.Fatalf("listed once made: %q", got)
	}
	if n, err := svc.SweepUnfinishedForks(ctx); n != 0 || err != nil || slices.Contains(rm.ids, f.th.ID()) {
		t.Fatalf("the sweep took a fork made: %d %v", n, err)
	}

	// A fork cut short by its server's death: its thread is marked, and
	// no lease is held for it.
	cut, err := thread.New("thr_cut", p.OrgID, th.ProjectID(), p.UserID, "Fork of T", th.CreatedAt())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateThread(ctx, cut.AsFork()); err != nil {
		t.Fatal(err)
	}
	if got := titles(); len(got) != 2 {
		t.Fatalf("a cut fork is listed: %q", got)
	}
	if n, err := svc.SweepUnfinishedForks(ctx); n != 1 || err != nil {
		t.Fatalf("sweep of a cut fork: %d %v", n, err)
	}
	if _, err := st.Thread(ctx, p.OrgID, p.UserID, cut.ID()); !fault.Is(err, fault.NotFound) || !slices.Contains(rm.ids, cut.ID()) {
		t.Fatalf("the cut fork stays (%v) or its sandbox does (removed %v)", err, rm.ids)
	}
	if _, err := st.Thread(ctx, p.OrgID, p.UserID, f.th.ID()); err != nil {
		t.Fatalf("the fork made is gone: %v", err)
	}
}

// TestFailedForkLeavesNothing forks a thread whose files cannot be
// written: the fork fails and its thread is deleted at once.
func TestFailedForkLeavesNothing(t *testing.T) {
	ctx := context.Background()
	rm := &removals{}
	svc, st, p, th := setupWith(t, scriptEngine{}, func(_ *turns.Deps, d *Deps) { d.Containers = rm })
	if _, err := svc.ForkThread(ctx, p, th.ID(), ""); err == nil {
		t.Fatal("a fork whose files cannot be written succeeded")
	}
	forks, err := st.UnfinishedForks(ctx)
	if err != nil || len(forks) != 0 {
		t.Fatalf("a failed fork stays: %v %v", forks, err)
	}
	list, err := svc.Threads(ctx, p, "", thread.Page{Limit: 50})
	if err != nil || len(list) != 1 || len(rm.ids) != 1 {
		t.Fatalf("after a failed fork: %v %v, removed %v", list, err, rm.ids)
	}
}

// sparseFiles is a container whose outputs hold one file of 1 TiB with
// 4 KiB of data, copied by its data alone; reading it whole fails.
type sparseFiles struct {
	copies []string // path and limit of each CopyFile
}

const sparseSize, sparseData = 1 << 40, 4096

func (*sparseFiles) Walk(_ context.Context, _, dir string) ([]file.Info, error) {
	if dir != sandbox.OutputsDir {
		return nil, nil
	}
	return []file.Info{{Rel: "disk.img", Size: sparseSize, Holes: sparseSize - sparseData}}, nil
}

func (*sparseFiles) Open(context.Context, string, string) (io.ReadSeekCloser, file.Info, error) {
	return nil, file.Info{}, errors.New("a file of 1 TiB read whole")
}

func (*sparseFiles) Write(context.Context, string, string, io.Reader, int64) (file.Info, error) {
	return file.Info{}, errors.New("a file of 1 TiB written whole")
}

func (*sparseFiles) SyncFile(context.Context, string, string) error { return nil }

func (s *sparseFiles) CopyFile(_ context.Context, _, _, p string, limit int64) (file.Info, int64, error) {
	s.copies = append(s.copies, fmt.Sprintf("%s %d", p, limit))
	if limit < sparseData {
		return file.Info{}, 0, file.ErrTooLarge
	}
	return file.Info{Size: sparseSize, Holes: sparseSize - sparseData}, sparseData, nil
}

// TestForkCopiesASparseFileByItsData forks a thread whose outputs hold a
// file of 1 TiB with 4 KiB of data (`truncate -s 1T` in its sandbox): the
// storage quota is asked about its data, not its size, and the file is
// copied by its data within those bytes.
func TestForkCopiesASparseFileByItsData(t *testing.T) {
	ctx := context.Background()
	files, q := &sparseFiles{}, &fakeQuota{left: 1 << 20}
	svc, _, p, th := setupWith(t, scriptEngine{}, func(_ *turns.Deps, d *Deps) {
		d.Container, d.Quota = files, q
	})
	if _, err := svc.ForkThread(ctx, p, th.ID(), ""); err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(q.stores) != 1 || q.stores[0] < sparseData || q.stores[0] >= 1<<20 {
		t.Fatalf("the quota was asked about %v bytes, want the data's %d and the messages'", q.stores, sparseData)
	}
	want := fmt.Sprintf("%s/disk.img %d", sandbox.OutputsDir, sparseData)
	if !slices.Equal(files.copies, []string{want}) {
		t.Fatalf("copies %q, want %q", files.copies, want)
	}
}
