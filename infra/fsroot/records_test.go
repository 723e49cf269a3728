package fsroot_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/files"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/user"
	"threadbox/infra/blob"
	"threadbox/infra/fsroot"
	"threadbox/infra/sparse/sparsetest"
)

// memRecords keeps file records in memory (the database's are tested
// through the API on SQLite and PostgreSQL).
type memRecords struct {
	mu   sync.Mutex
	recs map[[2]string]files.Record
}

func (m *memRecords) FileRecord(_ context.Context, cid, p string) (files.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[[2]string{cid, p}]
	if !ok {
		return files.Record{}, fault.New(fault.NotFound, "file record not found")
	}
	return r, nil
}

func (m *memRecords) FileRecords(_ context.Context, cid string) ([]files.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []files.Record
	for k, r := range m.recs {
		if k[0] == cid {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m *memRecords) PutFileRecord(_ context.Context, r files.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[[2]string{r.ContainerID, r.Path}] = r
	return nil
}

func (m *memRecords) DeleteFileRecord(_ context.Context, cid, p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, [2]string{cid, p})
	return nil
}

func (m *memRecords) DeleteFileRecords(_ context.Context, cid string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.recs {
		if k[0] == cid {
			delete(m.recs, k)
		}
	}
	return nil
}

func (m *memRecords) ExpiredFileRecords(_ context.Context, now time.Time, limit int) ([]files.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []files.Record
	for _, r := range m.recs {
		if r.Expired(now) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m *memRecords) FileContentReferenced(_ context.Context, sum string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.recs {
		if r.SHA256 == sum {
			return true, nil
		}
	}
	return false, nil
}

type recordsEnv struct {
	svc   *files.Service
	base  string
	now   time.Time
	recs  *memRecords
	blobs string
}

func newRecordsEnv(t *testing.T) *recordsEnv { return newRecordsEnvQuota(t, nil) }

// newRecordsEnvQuota is newRecordsEnv with the storage quota q (nil: none).
func newRecordsEnvQuota(t *testing.T, q files.Quota) *recordsEnv {
	return newRecordsEnvDeps(t, func(d *files.Deps) { d.Quota = q })
}

// newRecordsEnvDeps is newRecordsEnv with its service's Deps changed by
// edit.
func newRecordsEnvDeps(t *testing.T, edit func(*files.Deps)) *recordsEnv {
	base := t.TempDir()
	e := &recordsEnv{base: base, now: time.Date(2026, 10, 8, 10, 30, 0, 0, time.UTC), recs: &memRecords{recs: map[[2]string]files.Record{}}, blobs: filepath.Join(base, "blobs")}
	dirsOf := func(cid string) fsroot.Dirs {
		root := filepath.Join(base, cid)
		return fsroot.Dirs{Workspace: filepath.Join(root, "workspace"), Uploads: filepath.Join(root, "uploads"),
			Outputs: filepath.Join(root, "outputs"), Skills: filepath.Join(root, "skills")}
	}
	d := files.Deps{
		Store:      fsroot.NewContainers(dirsOf, fsroot.Options{}),
		Containers: &goneContainers{base: base},
		Policies:   &fakePolicies{policy: org.DefaultPolicy()},
		Records:    e.recs,
		Blobs:      blob.New(e.blobs),
		Now:        func() time.Time { return e.now },
	}
	edit(&d)
	e.svc = files.New(d)
	for _, d := range []string{"workspace", "uploads", "outputs", "skills"} {
		if err := os.MkdirAll(filepath.Join(base, "c-s1", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// goneContainers is fakeContainers whose container is not found once its
// folder is gone, as a container removed at its maximum age.
type goneContainers struct {
	fakeContainers
	base string
}

func (g *goneContainers) Container(ctx context.Context, p user.Principal, scopeID string, create bool) (string, error) {
	if _, err := os.Stat(filepath.Join(g.base, "c-"+scopeID)); err != nil {
		return "", fault.New(fault.NotFound, "container \"s1\" has passed its maximum age")
	}
	return g.fakeContainers.Container(ctx, p, scopeID, create)
}

// TestUploadExpiry: an upload with an expiry reports it, answers 404 once
// it passed (and is deleted), and the sweep deletes an expired file
// nobody asked for; a file written again at the path loses the expiry.
func TestUploadExpiry(t *testing.T) {
	e := newRecordsEnv(t)
	ctx := context.Background()
	up := func(key string, ttl time.Duration) (files.File, error) {
		return e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Key: key, Body: strings.NewReader("x"), Limit: 1 << 20, ExpiresIn: ttl})
	}
	for _, bad := range []time.Duration{time.Minute, 91 * 24 * time.Hour} {
		if _, err := up("bad.txt", bad); fault.KindOf(err) != fault.Invalid {
			t.Fatalf("expiry %s: %v", bad, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.base, "c-s1", "uploads", "bad.txt")); !os.IsNotExist(err) {
		t.Fatalf("a refused expiry stored the file: %v", err)
	}
	a, err := up("a.txt", 2*time.Hour)
	if err != nil || !a.ExpiresAt.Equal(e.now.Add(2*time.Hour)) {
		t.Fatalf("upload: %+v %v", a, err)
	}
	b, _ := up("b.txt", time.Hour)
	c, _ := up("c.txt", time.Hour)
	if _, err := up("c.txt", 0); err != nil {
		t.Fatal(err)
	}
	if m, err := e.svc.Metadata(ctx, alice, "s1", a.ID); err != nil || !m.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("metadata: %+v %v", m, err)
	}
	e.now = e.now.Add(90 * time.Minute)
	if _, err := e.svc.Metadata(ctx, alice, "s1", b.ID); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("an expired file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.base, "c-s1", "uploads", "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("the expired file is still there: %v", err)
	}
	if m, err := e.svc.Metadata(ctx, alice, "s1", c.ID); err != nil || !m.ExpiresAt.IsZero() {
		t.Fatalf("a file written again without an expiry: %+v %v", m, err)
	}
	e.now = e.now.Add(time.Hour)
	if n, err := e.svc.SweepExpired(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(e.base, "c-s1", "uploads", "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the sweep left the expired file: %v", err)
	}
}

// TestRetainedOutputs: the outputs of a container removed at its maximum
// age stay listed, readable and downloadable by id; uploads do not; a
// delete removes one for good, content included.
func TestRetainedOutputs(t *testing.T) {
	e := newRecordsEnv(t)
	ctx := context.Background()
	out, err := e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Key: "outputs/report.csv", Body: strings.NewReader("a,b\n1,2\n"), Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	up, _ := e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Key: "in.txt", Body: strings.NewReader("in"), Limit: 1 << 20})
	if _, err := e.svc.Retain(ctx, "c-s1", "o1", "u1"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(e.base, "c-s1")); err != nil {
		t.Fatal(err)
	}
	m, err := e.svc.Metadata(ctx, alice, "s1", out.ID)
	if err != nil || m.SizeBytes != 8 || !m.Downloadable || m.Filename != "report.csv" || m.MIMEType != "text/csv" {
		t.Fatalf("retained metadata: %+v %v", m, err)
	}
	ct, err := e.svc.Open(ctx, alice, "s1", out.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(ct.Body)
	ct.Body.Close()
	if string(body) != "a,b\n1,2\n" {
		t.Fatalf("retained content %q", body)
	}
	page, err := e.svc.List(ctx, alice, "s1", files.ListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != out.ID {
		t.Fatalf("retained listing: %+v %v", page, err)
	}
	if _, err := e.svc.Metadata(ctx, alice, "s1", up.ID); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("an upload of the removed container: %v", err)
	}
	bob := alice
	bob.UserID = "u2"
	if _, err := e.svc.Metadata(ctx, bob, "s1", out.ID); fault.KindOf(err) != fault.NotFound {
		t.Fatalf("another user: %v", err)
	}
	if _, err := e.svc.Delete(ctx, alice, "s1", out.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Metadata(ctx, alice, "s1", out.ID); fault.KindOf(err) == "" || fault.KindOf(err) != fault.NotFound {
		t.Fatalf("after delete: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(e.blobs, "*", "*"))
	if len(left) != 0 {
		t.Fatalf("the retained content stayed: %v", left)
	}
}

// TestRetainedOutputWithHoles: an output of 64 MiB with a few bytes
// written (a sandbox's truncate) would be stored whole in the blob store,
// its holes written out: past what the org may still store (1 MiB) it is
// not retained and its path is returned; an ordinary output beside it is
// retained. Without a storage quota it is retained whole.
func TestRetainedOutputWithHoles(t *testing.T) {
	const size = 64 << 20
	for _, tc := range []struct {
		name  string
		quota files.Quota
		want  []string
	}{
		{"quota", &fakeQuota{left: 1 << 20}, []string{"/mnt/user-data/outputs/disk.img"}},
		{"no quota", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRecordsEnvQuota(t, tc.quota)
			ctx := context.Background()
			outs := filepath.Join(e.base, "c-s1", "outputs")
			sparsetest.Make(t, filepath.Join(outs, "disk.img"), size, sparsetest.Piece{Off: size / 2, Data: "middle"})
			if err := os.WriteFile(filepath.Join(outs, "report.csv"), []byte("a,b\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			skipped, err := e.svc.Retain(ctx, "c-s1", "o1", "u1")
			if err != nil || !slices.Equal(skipped, tc.want) {
				t.Fatalf("retain: skipped %q, %v; want %q", skipped, err, tc.want)
			}
			if r, err := e.recs.FileRecord(ctx, "c-s1", "/mnt/user-data/outputs/report.csv"); err != nil || r.SizeBytes != 4 {
				t.Fatalf("the ordinary output: %+v %v", r, err)
			}
			r, err := e.recs.FileRecord(ctx, "c-s1", "/mnt/user-data/outputs/disk.img")
			if tc.want != nil && err == nil {
				t.Fatalf("the output with holes was retained: %+v", r)
			}
			if tc.want == nil && (err != nil || r.SizeBytes != size) {
				t.Fatalf("without a quota the output with holes is retained whole: %+v %v", r, err)
			}
		})
	}
}

// cappedBlobs is a blob store that refuses to take more than max bytes in
// one Put: a test whose retention would write out a terabyte fails at
// once instead of filling the disk.
type cappedBlobs struct {
	files.Blobs
	max int64
}

func (b cappedBlobs) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	return b.Blobs.Put(ctx, &cappedReader{r: r, left: b.max})
}

type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return n, errors.New("more written to the blob store than the test allows")
	}
	return n, err
}

// growingStore is a file store whose Walk is followed by grow: an output
// that grows between being listed and being copied.
type growingStore struct {
	files.Store
	grow func()
}

func (g growingStore) Walk(ctx context.Context, containerID, sandboxPath string) ([]file.Info, error) {
	infos, err := g.Store.Walk(ctx, containerID, sandboxPath)
	g.grow()
	return infos, err
}

// TestRetainedOutputsAreBounded: without a storage quota retention still
// writes out no more than the server's cap. A sparse output of 1 TiB is
// left out while an ordinary one beside it is retained; outputs with holes
// are retained while their holes together fit the cap; an output that grew
// past the cap after it was listed is left out, its partial copy removed.
func TestRetainedOutputsAreBounded(t *testing.T) {
	const tib = 1 << 40
	ctx := context.Background()
	retain := func(t *testing.T, e *recordsEnv, want []string) {
		t.Helper()
		skipped, err := e.svc.Retain(ctx, "c-s1", "o1", "u1")
		if err != nil || !slices.Equal(skipped, want) {
			t.Fatalf("retain: skipped %q, %v; want %q", skipped, err, want)
		}
		for _, p := range want {
			if r, err := e.recs.FileRecord(ctx, "c-s1", p); err == nil {
				t.Fatalf("%s was retained: %+v", p, r)
			}
		}
	}
	writeCSV := func(t *testing.T, e *recordsEnv) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(e.base, "c-s1", "outputs", "report.csv"), []byte("a,b\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(t *testing.T, e *recordsEnv, p string, size int64) {
		t.Helper()
		if r, err := e.recs.FileRecord(ctx, "c-s1", p); err != nil || r.SizeBytes != size {
			t.Fatalf("%s: %+v %v", p, r, err)
		}
	}
	t.Run("a terabyte", func(t *testing.T) {
		e := newRecordsEnvDeps(t, func(d *files.Deps) { d.Blobs = cappedBlobs{Blobs: d.Blobs, max: 64 << 20} })
		sparsetest.Make(t, filepath.Join(e.base, "c-s1", "outputs", "disk.img"), tib, sparsetest.Piece{Off: tib / 2, Data: "middle"})
		writeCSV(t, e)
		retain(t, e, []string{"/mnt/user-data/outputs/disk.img"})
		kept(t, e, "/mnt/user-data/outputs/report.csv", 4)
	})
	t.Run("holes together", func(t *testing.T) {
		const limit, size = 1 << 20, 768 << 10
		e := newRecordsEnvDeps(t, func(d *files.Deps) { d.MaxRetainedBytes = limit })
		for _, name := range []string{"a.img", "b.img"} {
			sparsetest.Make(t, filepath.Join(e.base, "c-s1", "outputs", name), size, sparsetest.Piece{Off: 0, Data: "head"})
		}
		writeCSV(t, e)
		retain(t, e, []string{"/mnt/user-data/outputs/b.img"})
		kept(t, e, "/mnt/user-data/outputs/a.img", size)
		kept(t, e, "/mnt/user-data/outputs/report.csv", 4)
	})
	t.Run("grown after listing", func(t *testing.T) {
		const limit = 1 << 20
		var out string
		e := newRecordsEnvDeps(t, func(d *files.Deps) {
			d.MaxRetainedBytes = limit
			d.Store = growingStore{Store: d.Store, grow: func() {
				if err := os.WriteFile(out, make([]byte, 2*limit), 0o644); err != nil {
					t.Error(err)
				}
			}}
		})
		out = filepath.Join(e.base, "c-s1", "outputs", "log.txt")
		if err := os.WriteFile(out, []byte("start\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		retain(t, e, []string{"/mnt/user-data/outputs/log.txt"})
		if left, _ := filepath.Glob(filepath.Join(e.blobs, "*", "*")); len(left) != 0 {
			t.Fatalf("the partial copy stayed: %v", left)
		}
	})
}
