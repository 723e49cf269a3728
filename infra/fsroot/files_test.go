package fsroot_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"threadbox/app/files"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/user"
	"threadbox/infra/fsroot"
)

// The Files API use cases (app/files) over the real confined store: moved
// here from app/files, whose tests never import infra.

// Containers serves app/files' Store port.
var _ files.Store = (*fsroot.Containers)(nil)

// fakeContainers lets user "u1" use any scope, mapped to "c-"+scope, and
// records whether each call asked to create.
type fakeContainers struct {
	creates []bool
}

func (f *fakeContainers) Container(_ context.Context, p user.Principal, scopeID string, create bool) (string, error) {
	f.creates = append(f.creates, create)
	if p.UserID != "u1" {
		return "", fault.New(fault.NotFound, "container not found")
	}
	return "c-" + scopeID, nil
}

func (f *fakeContainers) StorageID(_ context.Context, p user.Principal, scopeID string) (string, error) {
	if p.UserID != "u1" {
		return "", fault.New(fault.NotFound, "container not found")
	}
	return "c-" + scopeID, nil
}

type fakePolicies struct{ policy org.Policy }

func (f *fakePolicies) OrgPolicy(_ context.Context, orgID string) (org.Policy, error) {
	if orgID != "o1" {
		return org.Policy{}, errors.New("unknown org")
	}
	return f.policy, nil
}

func policy(t *testing.T, uploads bool, maxBytes int64, generated, uploaded bool) org.Policy {
	t.Helper()
	p, err := org.NewPolicy(true, uploads, maxBytes, generated, uploaded)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type env struct {
	svc        *files.Service
	base       string
	containers *fakeContainers
	policies   *fakePolicies
	now        time.Time
}

var alice = user.Principal{UserID: "u1", OrgID: "o1"}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with the storage quota q (nil: none).
func newEnvWith(t *testing.T, q files.Quota) *env {
	t.Helper()
	base := t.TempDir()
	dirsOf := func(cid string) fsroot.Dirs {
		root := filepath.Join(base, cid)
		d := fsroot.Dirs{
			Workspace: filepath.Join(root, "workspace"),
			Uploads:   filepath.Join(root, "uploads"),
			Outputs:   filepath.Join(root, "outputs"),
			Skills:    filepath.Join(root, "skills"),
		}
		for _, p := range []string{d.Workspace, d.Uploads, d.Outputs, d.Skills} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	e := &env{
		base:       base,
		containers: &fakeContainers{},
		policies:   &fakePolicies{policy: org.DefaultPolicy()},
		now:        time.Date(2026, 10, 8, 10, 30, 0, 0, time.UTC),
	}
	e.svc = files.New(files.Deps{
		Store:      fsroot.NewContainers(dirsOf, fsroot.Options{}),
		Containers: e.containers,
		Policies:   e.policies,
		Quota:      q,
		Now:        func() time.Time { return e.now },
	})
	return e
}

// host returns the host path of a file of scope "s1".
func (e *env) host(mount, rel string) string {
	return filepath.Join(e.base, "c-s1", mount, filepath.FromSlash(rel))
}

func (e *env) upload(t *testing.T, key, body string) files.File {
	t.Helper()
	f, err := e.svc.Upload(context.Background(), alice, files.UploadRequest{ScopeID: "s1", Key: key, Body: strings.NewReader(body), Limit: 1 << 20})
	if err != nil {
		t.Fatalf("upload %s: %v", key, err)
	}
	return f
}

func wantKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	if err == nil || fault.KindOf(err) != k {
		t.Fatalf("error = %v (kind %s), want kind %s", err, fault.KindOf(err), k)
	}
}

func TestUploadByFilename(t *testing.T) {
	e := newEnv(t)
	before := time.Now().Add(-time.Second)
	f, err := e.svc.Upload(context.Background(), alice, files.UploadRequest{ScopeID: "s1", Filename: "sales.csv", Body: strings.NewReader("month,revenue\n1,2\n"), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y" || f.Path != "/mnt/user-data/uploads/sales.csv" || f.Key != "sales.csv" {
		t.Errorf("id/path/key = %s %s %s", f.ID, f.Path, f.Key)
	}
	if f.Filename != "sales.csv" || f.MIMEType != "text/csv" || f.SizeBytes != 18 || f.Downloadable || f.ScopeID != "s1" || !f.Inline {
		t.Errorf("file = %+v", f)
	}
	if len(f.ETag) != 32 || f.CreatedAt.Before(before) || f.CreatedAt.Location() != time.UTC {
		t.Errorf("etag %q created %v", f.ETag, f.CreatedAt)
	}
	if b, err := os.ReadFile(e.host("uploads", "sales.csv")); err != nil || string(b) != "month,revenue\n1,2\n" {
		t.Errorf("stored %q, %v", b, err)
	}
	if len(e.containers.creates) != 1 || !e.containers.creates[0] {
		t.Errorf("upload did not ask to create the container: %v", e.containers.creates)
	}
}

func TestUploadKeys(t *testing.T) {
	e := newEnv(t)
	f := e.upload(t, "outputs/charts/r.png", "\x89PNG\r\n\x1a\n")
	if f.Path != "/mnt/user-data/outputs/charts/r.png" || !f.Downloadable || f.MIMEType != "image/png" || f.Filename != "r.png" || f.Key != "outputs/charts/r.png" {
		t.Errorf("outputs upload = %+v", f)
	}
	g := e.upload(t, "data/2026/q3.csv", "a")
	if g.Path != "/mnt/user-data/uploads/data/2026/q3.csv" {
		t.Errorf("nested upload path %s", g.Path)
	}
	// Overwrite keeps the id and changes the etag.
	h := e.upload(t, "data/2026/q3.csv", "ab")
	if h.ID != g.ID || h.ETag == g.ETag || h.SizeBytes != 2 {
		t.Errorf("overwrite: %+v vs %+v", h, g)
	}
	for _, key := range []string{"../x", "/abs", "a/", "a//b", "%2e%2e/x", "a\\b", "outputs/"} {
		_, err := e.svc.Put(context.Background(), alice, "s1", key, strings.NewReader("x"), 10)
		wantKind(t, err, fault.Invalid)
	}
	if _, err := os.Stat(filepath.Join(e.base, "x")); !os.IsNotExist(err) {
		t.Errorf("a refused key wrote outside: %v", err)
	}
	// A key whose parent is a file, or that names a folder, is a conflict.
	_, err := e.svc.Put(context.Background(), alice, "s1", "data/2026/q3.csv/x", strings.NewReader("x"), 10)
	wantKind(t, err, fault.Conflict)
	_, err = e.svc.Put(context.Background(), alice, "s1", "data/2026", strings.NewReader("x"), 10)
	wantKind(t, err, fault.Conflict)
}

func TestUploadPolicyAndLimits(t *testing.T) {
	e := newEnv(t)
	e.policies.policy = policy(t, false, 100, true, true)
	_, err := e.svc.Upload(context.Background(), alice, files.UploadRequest{ScopeID: "s1", Filename: "a.txt", Body: strings.NewReader("x"), Limit: 10})
	wantKind(t, err, fault.Forbidden)
	if !strings.Contains(err.Error(), "uploads") {
		t.Errorf("refusal does not name the feature: %v", err)
	}
	if _, err := os.Stat(e.host("uploads", "a.txt")); !os.IsNotExist(err) {
		t.Errorf("refused upload stored: %v", err)
	}
	// The policy's cap is lower than the server's.
	e.policies.policy = policy(t, true, 4, true, true)
	_, err = e.svc.Put(context.Background(), alice, "s1", "a.txt", strings.NewReader("12345"), 100)
	wantKind(t, err, fault.TooLarge)
	// The server's cap is lower than the policy's.
	e.policies.policy = policy(t, true, 100, true, true)
	_, err = e.svc.Put(context.Background(), alice, "s1", "a.txt", strings.NewReader("12345"), 3)
	wantKind(t, err, fault.TooLarge)
	if _, err := e.svc.Put(context.Background(), alice, "s1", "a.txt", strings.NewReader("123"), 3); err != nil {
		t.Errorf("upload at the cap: %v", err)
	}
	// Someone who may not use the container.
	_, err = e.svc.Put(context.Background(), user.Principal{UserID: "u2", OrgID: "o1"}, "s1", "b.txt", strings.NewReader("x"), 3)
	wantKind(t, err, fault.NotFound)
}

// failReader fails the test if read: a replayed upload must not consume it.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Error("body read on an idempotent replay")
	return 0, io.EOF
}

func TestUploadIdempotency(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := files.UploadRequest{ScopeID: "s1", Filename: "a.txt", Body: strings.NewReader("first"), Limit: 100, IdempotencyKey: "k1"}
	first, err := e.svc.Upload(ctx, alice, req)
	if err != nil {
		t.Fatal(err)
	}
	// The file changes meanwhile; the replay still answers the first result.
	if err := os.WriteFile(e.host("uploads", "a.txt"), []byte("changed!"), 0o644); err != nil {
		t.Fatal(err)
	}
	req.Body = failReader{t}
	again, err := e.svc.Upload(ctx, alice, req)
	if err != nil || again != first {
		t.Fatalf("replay = %+v, %v; want %+v", again, err, first)
	}
	// The same key for another file is a conflict.
	_, err = e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "b.txt", Body: strings.NewReader("x"), Limit: 100, IdempotencyKey: "k1"})
	wantKind(t, err, fault.Conflict)
	// Another user's identical key is theirs alone.
	bob := user.Principal{UserID: "u1", OrgID: "o2"}
	e.policies.policy = org.DefaultPolicy()
	if _, err := e.svc.Upload(ctx, bob, files.UploadRequest{ScopeID: "s1", Filename: "a.txt", Body: strings.NewReader("x"), IdempotencyKey: "k1"}); err == nil || strings.Contains(err.Error(), "Idempotency") {
		t.Errorf("key shared across principals: %v", err)
	}
	// After the time to live the key is forgotten and the upload runs again.
	e.now = e.now.Add(files.DefaultIdempotencyTTL + time.Minute)
	req.Body = strings.NewReader("third")
	third, err := e.svc.Upload(ctx, alice, req)
	if err != nil || third.SizeBytes != 5 {
		t.Fatalf("after TTL = %+v, %v", third, err)
	}
	if b, _ := os.ReadFile(e.host("uploads", "a.txt")); string(b) != "third" {
		t.Errorf("after TTL stored %q", b)
	}
}

// TestUploadIdempotencyRace: a key is held from the start of its first
// upload, so a repeat while it runs is refused instead of storing again, and
// a failed upload frees its key for the retry.
func TestUploadIdempotencyRace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pr, pw := io.Pipe()
	type result struct {
		f   files.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "a.txt", Body: pr, Limit: 100, IdempotencyKey: "k"})
		done <- result{f, err}
	}()
	// The first bytes are read: the first upload is storing.
	if _, err := pw.Write([]byte("fir")); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "a.txt", Body: failReader{t}, Limit: 100, IdempotencyKey: "k"})
	wantKind(t, err, fault.Conflict)
	if !strings.Contains(err.Error(), "in progress") {
		t.Errorf("repeat during the upload: %v", err)
	}
	_, err = e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "b.txt", Body: failReader{t}, Limit: 100, IdempotencyKey: "k"})
	wantKind(t, err, fault.Conflict)
	if !strings.Contains(err.Error(), "different upload") {
		t.Errorf("another file during the upload: %v", err)
	}
	if _, err := os.Stat(e.host("uploads", "b.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused upload stored: %v", err)
	}
	pw.Write([]byte("st"))
	pw.Close()
	first := <-done
	if first.err != nil || first.f.SizeBytes != 5 {
		t.Fatalf("first upload = %+v, %v", first.f, first.err)
	}
	again, err := e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "a.txt", Body: failReader{t}, Limit: 100, IdempotencyKey: "k"})
	if err != nil || again != first.f {
		t.Fatalf("retry after the upload = %+v, %v; want %+v", again, err, first.f)
	}

	// A failed upload (too large) leaves its key free.
	_, err = e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "c.txt", Body: strings.NewReader("123456"), Limit: 5, IdempotencyKey: "k2"})
	wantKind(t, err, fault.TooLarge)
	if f, err := e.svc.Upload(ctx, alice, files.UploadRequest{ScopeID: "s1", Filename: "c.txt", Body: strings.NewReader("1234"), Limit: 5, IdempotencyKey: "k2"}); err != nil || f.SizeBytes != 4 {
		t.Fatalf("retry after a failed upload = %+v, %v", f, err)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keys := []string{"b.csv", "outputs/chart.png", "data/2026/q1.csv", "data/2026/q2.csv", "data/2025/q4.csv"}
	var ids []string
	for _, k := range keys {
		ids = append(ids, e.upload(t, k, k).ID)
		time.Sleep(15 * time.Millisecond) // distinct creation times even on coarse clocks
	}
	// A workspace file, a symlink and an in-flight temp file are not listed.
	if err := os.WriteFile(filepath.Join(e.base, "c-s1", "workspace", "scratch.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", e.host("outputs", "link")); err != nil {
		t.Fatal(err)
	}

	page, err := e.svc.List(ctx, alice, "s1", files.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(page); strings.Join(got, ",") != strings.Join(ids, ",") || page.HasMore {
		t.Fatalf("List = %v (more %v), want %v", got, page.HasMore, ids)
	}
	if page.FirstID != ids[0] || page.LastID != ids[4] {
		t.Errorf("first/last = %s %s", page.FirstID, page.LastID)
	}
	if !page.Data[1].Downloadable || page.Data[0].Downloadable || page.Data[1].MIMEType != "image/png" {
		t.Errorf("entries %+v", page.Data[:2])
	}

	tests := []struct {
		name string
		lp   files.ListParams
		want []string
		more bool
	}{
		{"first page", files.ListParams{Limit: 2}, ids[0:2], true},
		{"after", files.ListParams{Limit: 2, AfterID: ids[1]}, ids[2:4], true},
		{"last page", files.ListParams{Limit: 2, AfterID: ids[3]}, ids[4:5], false},
		{"after the last", files.ListParams{Limit: 2, AfterID: ids[4]}, nil, false},
		{"before", files.ListParams{Limit: 2, BeforeID: ids[4]}, ids[2:4], true},
		{"before near start", files.ListParams{Limit: 2, BeforeID: ids[1]}, ids[0:1], false},
		{"prefix", files.ListParams{Prefix: "data/2026/"}, ids[2:4], false},
		{"prefix outputs", files.ListParams{Prefix: "outputs/"}, ids[1:2], false},
		{"prefix partial", files.ListParams{Prefix: "data/202"}, ids[2:5], false},
		{"prefix with limit", files.ListParams{Prefix: "data/", Limit: 1, AfterID: ids[2]}, ids[3:4], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := e.svc.List(ctx, alice, "s1", tt.lp)
			if err != nil {
				t.Fatal(err)
			}
			if got := idsOf(page); strings.Join(got, ",") != strings.Join(tt.want, ",") || page.HasMore != tt.more {
				t.Errorf("got %v more=%v, want %v more=%v", got, page.HasMore, tt.want, tt.more)
			}
			if len(tt.want) == 0 && (page.FirstID != "" || page.LastID != "" || page.Data == nil) {
				t.Errorf("empty page = %+v", page)
			}
		})
	}
	for _, lp := range []files.ListParams{{Limit: -1}, {Limit: 1001}, {AfterID: ids[0], BeforeID: ids[1]}, {AfterID: file.EncodeID("/mnt/user-data/uploads/nope")}} {
		_, err := e.svc.List(ctx, alice, "s1", lp)
		wantKind(t, err, fault.Invalid)
	}
}

func idsOf(p files.Page) []string {
	var out []string
	for _, f := range p.Data {
		out = append(out, f.ID)
	}
	return out
}

// TestETagSeesRewriteInPlace checks that a file rewritten in place, at
// the same size and with its modification time set back (as code in a
// sandbox can do), gets a new ETag: caches keyed by it must not serve the
// old content.
func TestETagSeesRewriteInPlace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.upload(t, "data.csv", "a,b\n") // makes the container's folders
	ws := filepath.Join(e.base, "c-s1", "workspace", "chart.png")
	if err := os.WriteFile(ws, []byte("\x89PNG\r\n\x1a\nfirst"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := file.EncodeID("/home/agent/workspace/chart.png")
	before, err := e.svc.Metadata(ctx, alice, "s1", id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(ws)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(ws, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("other"), 8); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(ws, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := e.svc.Metadata(ctx, alice, "s1", id)
	if err != nil {
		t.Fatal(err)
	}
	if after.SizeBytes != before.SizeBytes {
		t.Fatalf("size %d, was %d: the rewrite was not in place", after.SizeBytes, before.SizeBytes)
	}
	if after.ETag == before.ETag {
		t.Errorf("ETag %s unchanged after the file was rewritten with its modification time set back", after.ETag)
	}
}

func TestMetadata(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	up := e.upload(t, "data/x.json", `{"a":1}`)
	got, err := e.svc.Metadata(ctx, alice, "s1", up.ID)
	if err != nil || got != up {
		t.Fatalf("Metadata = %+v, %v; want %+v", got, err, up)
	}
	ws := filepath.Join(e.base, "c-s1", "workspace", "notes.md")
	if err := os.WriteFile(ws, []byte("# hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	wf, err := e.svc.Metadata(ctx, alice, "s1", file.EncodeID("/home/agent/workspace/notes.md"))
	if err != nil || !wf.Downloadable || wf.Key != "" || wf.MIMEType != "text/markdown" {
		t.Errorf("workspace file = %+v, %v", wf, err)
	}
	tests := []struct {
		name, id string
		kind     fault.Kind
	}{
		{"malformed", "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y=", fault.Invalid},
		{"missing", file.EncodeID("/mnt/user-data/uploads/none.csv"), fault.NotFound},
		{"folder", file.EncodeID("/mnt/user-data/uploads/data"), fault.NotFound},
		{"mount root", file.EncodeID("/mnt/user-data/uploads"), fault.NotFound},
		{"outside", file.EncodeID("/etc/passwd"), fault.NotFound},
		{"prefix sibling", file.EncodeID("/mnt/user-data/outputs-x/a"), fault.NotFound},
		{"skills", file.EncodeID("/mnt/skills/s/SKILL.md"), fault.NotFound},
	}
	for _, tt := range tests {
		_, err := e.svc.Metadata(ctx, alice, "s1", tt.id)
		if fault.KindOf(err) != tt.kind {
			t.Errorf("%s: %v, want kind %s", tt.name, err, tt.kind)
		}
	}
	_, err = e.svc.Metadata(ctx, user.Principal{UserID: "u2", OrgID: "o1"}, "s1", up.ID)
	wantKind(t, err, fault.NotFound)
}

func TestOpenObeysPolicy(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	up := e.upload(t, "in.csv", "a,b\n")
	out := e.upload(t, "outputs/page.html", "<html><script>x</script></html>")

	read := func(c files.Content) string {
		t.Helper()
		defer c.Body.Close()
		b, err := io.ReadAll(c.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	c, err := e.svc.Open(ctx, alice, "s1", up.ID)
	if err != nil || read(c) != "a,b\n" || !c.File.Inline || c.File.MIMEType != "text/csv" {
		t.Fatalf("Open upload = %+v, %v", c.File, err)
	}
	c, err = e.svc.Open(ctx, alice, "s1", out.ID)
	if err != nil || read(c) != "<html><script>x</script></html>" || c.File.Inline {
		t.Fatalf("Open html output = %+v, %v", c.File, err)
	}

	tests := []struct {
		name                string
		generated, uploaded bool
		upOK, outOK         bool
	}{
		{"all on", true, true, true, true},
		{"no uploaded", true, false, false, true},
		{"no generated", false, true, true, false},
		{"none", false, false, false, false},
	}
	for _, tt := range tests {
		e.policies.policy = policy(t, true, 100, tt.generated, tt.uploaded)
		for _, x := range []struct {
			id string
			ok bool
		}{{up.ID, tt.upOK}, {out.ID, tt.outOK}} {
			c, err := e.svc.Open(ctx, alice, "s1", x.id)
			if x.ok {
				if err != nil {
					t.Errorf("%s: Open(%s) = %v", tt.name, x.id, err)
					continue
				}
				c.Body.Close()
			} else if fault.KindOf(err) != fault.Forbidden {
				t.Errorf("%s: Open(%s) = %v, want Forbidden", tt.name, x.id, err)
			}
		}
	}
	e.policies.policy = org.DefaultPolicy()
	c, err = e.svc.OpenPath(ctx, alice, "s1", "/mnt/user-data/outputs/page.html")
	if err != nil || read(c) != "<html><script>x</script></html>" {
		t.Fatalf("OpenPath = %v", err)
	}
	// A symlink planted in outputs is never served.
	if err := os.Symlink("/etc/hostname", e.host("outputs", "leak")); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.OpenPath(ctx, alice, "s1", "/mnt/user-data/outputs/leak")
	wantKind(t, err, fault.NotFound)
	_, err = e.svc.OpenPath(ctx, alice, "s1", "/etc/hostname")
	wantKind(t, err, fault.NotFound)
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	up := e.upload(t, "a.csv", "x")
	id, err := e.svc.Delete(ctx, alice, "s1", up.ID)
	if err != nil || id != up.ID {
		t.Fatalf("Delete = %s, %v", id, err)
	}
	if _, err := os.Stat(e.host("uploads", "a.csv")); !os.IsNotExist(err) {
		t.Errorf("still there: %v", err)
	}
	_, err = e.svc.Delete(ctx, alice, "s1", up.ID)
	wantKind(t, err, fault.NotFound)
	// A symlink left by the sandbox is removed, its target is not.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, e.host("outputs", "l")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Delete(ctx, alice, "s1", file.EncodeID("/mnt/user-data/outputs/l")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep" {
		t.Errorf("target changed: %q %v", b, err)
	}
	if _, err := os.Lstat(e.host("outputs", "l")); !os.IsNotExist(err) {
		t.Errorf("link kept: %v", err)
	}
	e.upload(t, "dir/f", "x")
	_, err = e.svc.Delete(ctx, alice, "s1", file.EncodeID("/mnt/user-data/uploads/dir"))
	wantKind(t, err, fault.NotFound)
}

func TestDeletePrefix(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, k := range []string{"data/2026/a.csv", "data/2026/b/c.csv", "data/2025/d.csv", "outputs/data/2026/e.csv"} {
		e.upload(t, k, "x")
	}
	n, err := e.svc.DeletePrefix(ctx, alice, "s1", "data/2026/")
	if err != nil || n != 2 {
		t.Fatalf("DeletePrefix = %d, %v; want 2", n, err)
	}
	page, _ := e.svc.List(ctx, alice, "s1", files.ListParams{})
	var keys []string
	for _, f := range page.Data {
		keys = append(keys, f.Key)
	}
	slices.Sort(keys) // created within one clock tick: order by time is not known
	if strings.Join(keys, ",") != "data/2025/d.csv,outputs/data/2026/e.csv" {
		t.Errorf("left %v", keys)
	}
	// Outputs are not uploaded files: an outputs/ prefix deletes nothing.
	if n, err := e.svc.DeletePrefix(ctx, alice, "s1", "outputs/"); err != nil || n != 0 {
		t.Errorf("DeletePrefix(outputs/) = %d, %v", n, err)
	}
	for _, bad := range []string{"", "/", "../", "a//", "%2e%2e/", "/abs"} {
		_, err := e.svc.DeletePrefix(ctx, alice, "s1", bad)
		wantKind(t, err, fault.Invalid)
	}
}
