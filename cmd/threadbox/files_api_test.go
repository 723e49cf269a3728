package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/infra/sandbox/hostdirs"
)

const filesAPI = "/api/gpt/v1/files"

func fileID(sandboxPath string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(sandboxPath))
}

// multipartBody builds a multipart body: fields in order, each a name and a
// value; a name "file" with filename fname holds the file's bytes.
type mpField struct {
	name, filename, value string
	rawDisposition        string // overrides the Content-Disposition header
}

func multipartBody(t *testing.T, fields ...mpField) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		h := textproto.MIMEHeader{}
		switch {
		case f.rawDisposition != "":
			h.Set("Content-Disposition", f.rawDisposition)
		case f.filename != "":
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, f.name, f.filename))
		default:
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, f.name))
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, f.value)
	}
	w.Close()
	return b.Bytes(), w.FormDataContentType()
}

// upload POSTs one file (and optional earlier fields) to the Files API.
func (s *server) upload(tok, scope, query, filename, content string, hdr ...string) response {
	s.t.Helper()
	body, ct := multipartBody(s.t, mpField{name: "file", filename: filename, value: content})
	q := "?scope_id=" + url.QueryEscape(scope)
	if query != "" {
		q += "&" + query
	}
	return s.do("POST", filesAPI+q, tok, body, append([]string{"Content-Type", ct}, hdr...)...)
}

// put stores raw bytes at a key (the key is sent as given, unescaped).
func (s *server) put(tok, scope, key, content string) response {
	s.t.Helper()
	return s.raw("PUT", filesAPI+"/"+key+"?scope_id="+url.QueryEscape(scope), tok, []byte(content))
}

// raw sends one request with the request target exactly as given, over a
// fresh connection (no client-side cleaning or escaping).
func (s *server) raw(method, target, token string, body []byte, hdr ...string) response {
	s.t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(s.base, "http://"), 5*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n", method, target, token, len(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		s.t.Fatalf("%s %q: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

// hostDirs returns the host folders of a user's container scope (or of a
// thread, whose container id is the thread id).
func (s *server) hostDirs(tok, scope string) hostdirs.Dirs {
	s.t.Helper()
	id := scope
	if !strings.HasPrefix(scope, "thr_") {
		me := s.do("GET", "/api/v1/app/me", tok, nil).json(s.t)
		id = container.UserScopedID(me["user_id"].(string), scope)
	}
	return hostdirs.New(s.dataDir, hostdirs.Options{}).Dirs(id)
}

func mustStatus(t *testing.T, what string, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
}

// checkFileObject checks the shape of a file object (docs/api.md, Files API).
func checkFileObject(t *testing.T, o map[string]any, sandboxPath, scope string, size int, downloadable bool) {
	t.Helper()
	if o["id"] != fileID(sandboxPath) || o["filename"] != filepath.Base(sandboxPath) || o["type"] != "file" ||
		o["namespace"] != "session" || o["size_bytes"] != float64(size) || o["downloadable"] != downloadable {
		t.Fatalf("file object of %s: %v", sandboxPath, o)
	}
	if sc, _ := o["scope"].(map[string]any); sc["id"] != scope || sc["type"] != "session" || len(sc) != 2 {
		t.Fatalf("scope of %s: %v", sandboxPath, o["scope"])
	}
	if et, _ := o["etag"].(string); len(et) < 16 {
		t.Fatalf("etag of %s: %v", sandboxPath, o["etag"])
	}
	if mt, _ := o["mime_type"].(string); mt == "" {
		t.Fatalf("mime_type of %s: %v", sandboxPath, o)
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(o["created_at"])); err != nil {
		t.Fatalf("created_at of %s: %v", sandboxPath, o["created_at"])
	}
	// The contract's ten fields and the Anthropic Files API's expires_at,
	// null without an expiry.
	if exp, ok := o["expires_at"]; len(o) != 11 || !ok || exp != nil {
		t.Fatalf("file object has %d fields, want the 10 of the contract and expires_at null: %v", len(o), o)
	}
}

func listIDs(t *testing.T, r response) []string {
	t.Helper()
	var ids []string
	for _, d := range r.json(t)["data"].([]any) {
		ids = append(ids, d.(map[string]any)["id"].(string))
	}
	return ids
}

func TestFilesAPIEndpointsAndShapes(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		const scope = "box1"
		q := "?scope_id=" + scope

		// Listing a container that was never used is a 404, not an empty page.
		mustStatus(t, "list unknown scope", s.do("GET", filesAPI+q, a, nil), 404)
		// No scope_id (the official SDKs send none): the caller's default
		// container, empty at first.
		if r := s.do("GET", filesAPI, a, nil); r.status != 200 || string(r.body) != `{"data":[],"first_id":null,"last_id":null,"has_more":false}` {
			t.Fatalf("no scope_id: %d %s", r.status, r.body)
		}

		r := s.upload(a, scope, "", "sales.csv", "a,b\n1,2\n")
		mustStatus(t, "upload", r, 200)
		checkFileObject(t, r.json(t), "/mnt/user-data/uploads/sales.csv", scope, 8, false)
		if r.json(t)["mime_type"] != "text/csv" {
			t.Fatalf("mime of sales.csv: %v", r.json(t)["mime_type"])
		}
		time.Sleep(5 * time.Millisecond)
		r = s.upload(a, scope, "path=outputs/report.txt", "ignored-name.bin", "the report")
		mustStatus(t, "upload to outputs", r, 200)
		checkFileObject(t, r.json(t), "/mnt/user-data/outputs/report.txt", scope, 10, true)
		time.Sleep(5 * time.Millisecond)
		// path as a form field before the file.
		body, ct := multipartBody(t, mpField{name: "path", value: "data/2026/q1.csv"}, mpField{name: "file", filename: "x.csv", value: "q"})
		r = s.do("POST", filesAPI+q, a, body, "Content-Type", ct)
		mustStatus(t, "upload with form path", r, 200)
		checkFileObject(t, r.json(t), "/mnt/user-data/uploads/data/2026/q1.csv", scope, 1, false)
		time.Sleep(5 * time.Millisecond)
		r = s.put(a, scope, "data/2026/q2.csv", "qq")
		mustStatus(t, "put", r, 200)
		checkFileObject(t, r.json(t), "/mnt/user-data/uploads/data/2026/q2.csv", scope, 2, false)
		// Overwrite keeps one file.
		mustStatus(t, "put again", s.put(a, scope, "data/2026/q2.csv", "qqq"), 200)

		// Files on disk are where the contract says.
		d := s.hostDirs(a, scope)
		for p, want := range map[string]string{
			filepath.Join(d.Uploads, "sales.csv"): "a,b\n1,2\n", filepath.Join(d.Outputs, "report.txt"): "the report",
			filepath.Join(d.Uploads, "data/2026/q2.csv"): "qqq",
		} {
			if b, err := os.ReadFile(p); err != nil || string(b) != want {
				t.Fatalf("%s on the host: %q %v", p, b, err)
			}
		}

		// Listing: creation order, paging both ways, prefix.
		order := []string{fileID("/mnt/user-data/uploads/sales.csv"), fileID("/mnt/user-data/outputs/report.txt"),
			fileID("/mnt/user-data/uploads/data/2026/q1.csv"), fileID("/mnt/user-data/uploads/data/2026/q2.csv")}
		r = s.do("GET", filesAPI+q, a, nil)
		mustStatus(t, "list", r, 200)
		lj := r.json(t)
		if got := listIDs(t, r); strings.Join(got, ",") != strings.Join(order, ",") || lj["has_more"] != false || lj["first_id"] != order[0] || lj["last_id"] != order[3] {
			t.Fatalf("list: %s", r.body)
		}
		r = s.do("GET", filesAPI+q+"&limit=2", a, nil)
		if got := listIDs(t, r); len(got) != 2 || got[0] != order[0] || r.json(t)["has_more"] != true {
			t.Fatalf("limit=2: %s", r.body)
		}
		r = s.do("GET", filesAPI+q+"&limit=2&after_id="+order[1], a, nil)
		if got := listIDs(t, r); strings.Join(got, ",") != strings.Join(order[2:], ",") || r.json(t)["has_more"] != false {
			t.Fatalf("after_id: %s", r.body)
		}
		r = s.do("GET", filesAPI+q+"&limit=1&before_id="+order[2], a, nil)
		if got := listIDs(t, r); len(got) != 1 || got[0] != order[1] || r.json(t)["has_more"] != true {
			t.Fatalf("before_id: %s", r.body)
		}
		r = s.do("GET", filesAPI+q+"&prefix=data/", a, nil)
		if got := listIDs(t, r); strings.Join(got, ",") != strings.Join(order[2:], ",") {
			t.Fatalf("prefix: %s", r.body)
		}
		r = s.do("GET", filesAPI+q+"&prefix=nothing/", a, nil)
		if lj := r.json(t); r.status != 200 || len(lj["data"].([]any)) != 0 || lj["first_id"] != nil || lj["last_id"] != nil || lj["has_more"] != false {
			t.Fatalf("empty page: %s", r.body)
		}
		for _, bad := range []string{"limit=0", "limit=1001", "limit=abc", "after_id=" + order[0] + "&before_id=" + order[1], "after_id=" + fileID("/mnt/user-data/uploads/none")} {
			if r := s.do("GET", filesAPI+q+"&"+bad, a, nil); r.status != 400 || r.errorType(t) != "invalid_request_error" {
				t.Fatalf("list %s: %d %s", bad, r.status, r.body)
			}
		}
		if r := s.do("GET", filesAPI+q+"&limit=1000", a, nil); r.status != 200 {
			t.Fatalf("limit=1000: %d", r.status)
		}

		// Metadata and HEAD.
		id := order[0]
		r = s.do("GET", filesAPI+"/"+id+q, a, nil)
		mustStatus(t, "metadata", r, 200)
		meta := r.json(t)
		checkFileObject(t, meta, "/mnt/user-data/uploads/sales.csv", scope, 8, false)
		r = s.do("HEAD", filesAPI+"/"+id+q, a, nil)
		mustStatus(t, "head", r, 200)
		for h, want := range map[string]string{
			"X-File-Id": id, "X-File-Filename": "sales.csv", "X-File-Mime-Type": "text/csv", "X-File-Size-Bytes": "8",
			"X-File-Type": "file", "X-File-Downloadable": "false", "X-File-Etag": meta["etag"].(string),
			"X-File-Namespace": "session", "X-File-Scope-Id": scope, "X-File-Created-At": meta["created_at"].(string),
		} {
			if got := r.header.Get(h); got != want {
				t.Fatalf("HEAD %s = %q, want %q", h, got, want)
			}
		}
		if len(r.body) != 0 {
			t.Fatalf("HEAD has a body: %q", r.body)
		}
		r = s.do("HEAD", filesAPI+"/"+fileID("/mnt/user-data/uploads/none.csv")+q, a, nil)
		if r.status != 404 || len(r.body) != 0 {
			t.Fatalf("HEAD missing: %d %q", r.status, r.body)
		}
		if r := s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/none.csv")+q, a, nil); r.status != 404 || r.errorType(t) != "not_found_error" {
			t.Fatalf("metadata missing: %d %s", r.status, r.body)
		}

		// Content: the bytes, as an attachment unless inline is asked and safe.
		r = s.do("GET", filesAPI+"/"+order[1]+"/content"+q, a, nil)
		mustStatus(t, "content", r, 200)
		if string(r.body) != "the report" || r.header.Get("X-Content-Type-Options") != "nosniff" ||
			r.header.Get("Content-Type") != "text/plain" || r.header.Get("Content-Security-Policy") == "" ||
			r.header.Get("Content-Disposition") != `attachment; filename="report.txt"; filename*=UTF-8''report.txt` ||
			r.header.Get("Content-Length") != "10" {
			t.Fatalf("content: %v %q", r.header, r.body)
		}
		r = s.do("GET", filesAPI+"/"+order[1]+"/content"+q+"&disposition=inline", a, nil)
		if !strings.HasPrefix(r.header.Get("Content-Disposition"), "inline;") {
			t.Fatalf("inline text: %v", r.header)
		}
		if r := s.do("GET", filesAPI+"/"+order[1]+"/content"+q+"&disposition=bogus", a, nil); r.status != 400 {
			t.Fatalf("bad disposition: %d", r.status)
		}

		// HTML, SVG and XML are never inline, whatever the client claims.
		for name, content := range map[string]string{
			"page.html": "<html><script>alert(1)</script></html>", "pic.svg": `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`,
			"feed.xml": `<?xml version="1.0"?><a/>`, "sneaky.txt": "<html><script>alert(1)</script></html>",
		} {
			body, ct := multipartBody(t, mpField{rawDisposition: fmt.Sprintf(`form-data; name="file"; filename=%q`, name), value: content})
			// The part's claimed type is ignored.
			body = bytes.Replace(body, []byte("\r\n\r\n"), []byte("\r\nContent-Type: image/png\r\n\r\n"), 1)
			mustStatus(t, "upload "+name, s.do("POST", filesAPI+q+"&path=outputs/"+name, a, body, "Content-Type", ct), 200)
			r := s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/"+name)+"/content"+q+"&disposition=inline", a, nil)
			if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment;") ||
				r.header.Get("Content-Security-Policy") != "sandbox; default-src 'none'" || r.header.Get("X-Content-Type-Options") != "nosniff" ||
				strings.HasPrefix(r.header.Get("Content-Type"), "image/png") {
				t.Fatalf("%s served as %d %v", name, r.status, r.header)
			}
		}

		// A workspace file (made by the sandbox) is reachable by id and deletable.
		if err := os.WriteFile(filepath.Join(d.Workspace, "scratch.py"), []byte("print(1)"), 0o644); err != nil {
			t.Fatal(err)
		}
		wid := fileID("/home/agent/workspace/scratch.py")
		r = s.do("GET", filesAPI+"/"+wid+q, a, nil)
		mustStatus(t, "workspace metadata", r, 200)
		checkFileObject(t, r.json(t), "/home/agent/workspace/scratch.py", scope, 8, true)
		if ids := listIDs(t, s.do("GET", filesAPI+q+"&limit=1000", a, nil)); strings.Contains(strings.Join(ids, ","), wid) {
			t.Fatal("workspace files are not listed")
		}
		r = s.do("DELETE", filesAPI+"/"+wid+q, a, nil)
		if r.status != 200 || r.json(t)["id"] != wid || r.json(t)["type"] != "file_deleted" || len(r.json(t)) != 2 {
			t.Fatalf("delete workspace file: %d %s", r.status, r.body)
		}
		if _, err := os.Stat(filepath.Join(d.Workspace, "scratch.py")); !os.IsNotExist(err) {
			t.Fatalf("workspace file still there: %v", err)
		}

		// Delete one (an output), then a prefix of uploads.
		r = s.do("DELETE", filesAPI+"/"+order[1]+q, a, nil)
		if r.status != 200 || r.json(t)["id"] != order[1] || r.json(t)["type"] != "file_deleted" {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
		mustStatus(t, "deleted metadata", s.do("GET", filesAPI+"/"+order[1]+q, a, nil), 404)
		mustStatus(t, "delete again", s.do("DELETE", filesAPI+"/"+order[1]+q, a, nil), 404)
		if r := s.do("DELETE", filesAPI+q, a, nil); r.status != 400 {
			t.Fatalf("delete without prefix: %d %s", r.status, r.body)
		}
		r = s.do("DELETE", filesAPI+q+"&prefix=data/2026/", a, nil)
		if r.status != 200 || r.json(t)["prefix"] != "data/2026/" || r.json(t)["deleted_count"] != float64(2) || r.json(t)["type"] != "prefix_deleted" {
			t.Fatalf("delete prefix: %d %s", r.status, r.body)
		}
		if got := listIDs(t, s.do("GET", filesAPI+q+"&prefix=data/", a, nil)); len(got) != 0 {
			t.Fatalf("prefix delete left %v", got)
		}
		mustStatus(t, "sales.csv survives the prefix delete", s.do("GET", filesAPI+"/"+order[0]+q, a, nil), 200)

		// A thread the caller owns is a scope too.
		pid := s.do("POST", "/api/v1/app/project", a, map[string]any{"name": "P"}).json(t)["id"].(string)
		tid := s.do("POST", "/api/v1/app/thread", a, map[string]any{"project_id": pid, "title": "T"}).json(t)["id"].(string)
		r = s.upload(a, tid, "", "thread.txt", "in the thread")
		mustStatus(t, "thread upload", r, 200)
		checkFileObject(t, r.json(t), "/mnt/user-data/uploads/thread.txt", tid, 13, false)
		if b, err := os.ReadFile(filepath.Join(s.hostDirs(a, tid).Uploads, "thread.txt")); err != nil || string(b) != "in the thread" {
			t.Fatalf("thread file on the host: %q %v", b, err)
		}
		if ids := listIDs(t, s.do("GET", filesAPI+"?scope_id="+tid, a, nil)); len(ids) != 1 {
			t.Fatalf("thread listing: %v", ids)
		}
		if ids := listIDs(t, s.do("GET", filesAPI+q, a, nil)); strings.Contains(strings.Join(ids, ","), fileID("/mnt/user-data/uploads/thread.txt")) {
			t.Fatal("a thread's file shows in another container")
		}
	})
}

func TestFilesAPITraversalAndIDForms(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "trav"
	q := "?scope_id=" + scope
	mustStatus(t, "first upload", s.put(a, scope, "ok.txt", "ok"), 200)
	d := s.hostDirs(a, scope)
	snapshot := func() string {
		var b strings.Builder
		filepath.Walk(s.dataDir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !strings.HasSuffix(p, ".db") && !strings.Contains(p, ".db-") {
				fmt.Fprintf(&b, "%s %d\n", p, fi.Size())
			}
			return nil
		})
		return b.String()
	}
	before := snapshot()

	// Keys of PUT, sent raw: every form of leaving the folders is a 400.
	for _, key := range []string{
		"../x", "a/../../x", "..", ".%2e/x", "%2e%2e/x", "%2E%2E/x", ".%2E/evil", "a/%2e%2e/%2e%2e/x",
		"%252e%252e/x", "a%2Fb", "a%2f..%2f..%2fx", "..%2Fx", "a%5Cb", "..%5Cx", `a\b`, `..\x`, "a%00b", "x/",
		"/etc/x", "outputs/../../x", "outputs/..", "outputs/", "a//b", "./x", "%2e/x", "a%0Ab",
	} {
		r := s.put(a, scope, key, "evil")
		if r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Errorf("PUT key %q: %d %s", key, r.status, r.body)
		}
	}
	// path= on POST, in the query and as a form field.
	for _, p := range []string{
		"../x", "a/../../x", ".%252e/x", "%252e%252e/x", "a%252Fb", "%2F..", "a%5Cb", "..%5Cx", "%00", "a%00b",
		"/etc/x", "x/", "outputs/../../x", "outputs/..", ".", "a%0D%0Ab",
	} {
		r := s.upload(a, scope, "path="+p, "f.txt", "evil")
		if r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Errorf("POST path=%q: %d %s", p, r.status, r.body)
		}
		dec, _ := url.QueryUnescape(p)
		body, ct := multipartBody(t, mpField{name: "path", value: dec}, mpField{name: "file", filename: "f.txt", value: "evil"})
		if r := s.do("POST", filesAPI+q, a, body, "Content-Type", ct); r.status != 400 {
			t.Errorf("POST form path %q: %d %s", dec, r.status, r.body)
		}
	}
	// File names without path=: no folders, no dots.
	for _, name := range []string{"../../x", "..", `..\x`, "a/b.txt", "/etc/passwd", ""} {
		if r := s.upload(a, scope, "", name, "evil"); r.status != 400 {
			t.Errorf("POST filename %q: %d %s", name, r.status, r.body)
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("refused writes changed the data folder:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A sibling of a mount sharing its prefix is a plain upload key, never
	// a way into outputs; a sandbox path outside the mounts is not found.
	r := s.put(a, scope, "outputs-x/a.txt", "sib")
	mustStatus(t, "outputs-x key", r, 200)
	if r.json(t)["id"] != fileID("/mnt/user-data/uploads/outputs-x/a.txt") {
		t.Fatalf("outputs-x landed at %v", r.json(t)["id"])
	}
	if _, err := os.Stat(filepath.Join(d.Uploads, "outputs-x", "a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d.Root, "outputs-x"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d.Root, "outputs-x", "b.txt"), []byte("beside"), 0o644)
	os.WriteFile(filepath.Join(d.Skills, "s.txt"), []byte("skill"), 0o644)
	for _, p := range []string{
		"/mnt/user-data/outputs-x/b.txt", "/mnt/user-data/uploads-x/a.txt", "/etc/passwd", "/mnt/skills/s.txt",
		"/mnt/user-data/uploads", "/mnt/user-data/outputs", "/home/agent/workspace", "/mnt/user-data", "/",
		"/home/agent/workspace-x/a", "/mnt/user-data/uploads/outputs-x",
	} {
		for _, suffix := range []string{"", "/content"} {
			if r := s.do("GET", filesAPI+"/"+fileID(p)+suffix+q, a, nil); r.status != 404 || r.errorType(t) != "not_found_error" {
				t.Errorf("GET %s%s: %d %s", p, suffix, r.status, r.body)
			}
		}
		if r := s.do("DELETE", filesAPI+"/"+fileID(p)+q, a, nil); r.status != 404 {
			t.Errorf("DELETE %s: %d %s", p, r.status, r.body)
		}
	}
	if _, err := os.Stat(filepath.Join(d.Root, "outputs-x", "b.txt")); err != nil {
		t.Fatalf("a delete reached a sibling folder: %v", err)
	}

	// Ids in any non-canonical form are a 400, sent raw.
	good := fileID("/mnt/user-data/uploads/ok.txt")
	mustStatus(t, "canonical id", s.raw("GET", filesAPI+"/"+good+q, a, nil), 200)
	// A file whose id uses the alphabet's '-' or '_'.
	var odd, oddPath string
	for i := 0; odd == ""; i++ {
		p := fmt.Sprintf("/mnt/user-data/uploads/f%d~?>.txt", i)
		if id := fileID(p); strings.ContainsAny(id, "-_") {
			odd, oddPath = id, p
		}
	}
	mustStatus(t, "odd upload", s.put(a, scope, url.PathEscape(strings.TrimPrefix(oddPath, "/mnt/user-data/uploads/")), "odd"), 200)
	mustStatus(t, "odd id", s.raw("GET", filesAPI+"/"+odd+q, a, nil), 200)
	std := strings.NewReplacer("-", "+", "_", "/").Replace(odd)
	padded := base64.URLEncoding.EncodeToString([]byte("/mnt/user-data/uploads/ok.txt"))
	if !strings.HasSuffix(padded, "=") {
		t.Fatal("test needs a padded form")
	}
	for _, id := range []string{
		padded, strings.ReplaceAll(padded, "=", "%3D"), std, url.PathEscape(std), good + "%20", "%20" + good, good + "%0A",
		good[:10] + "%0A" + good[10:], good + "%09", "%" + fmt.Sprintf("%02X", good[0]) + good[1:], good + "=",
		fileID("/mnt/user-data/uploads/../uploads/ok.txt"), fileID("/mnt/user-data/uploads/./ok.txt"),
		fileID("/mnt/user-data/uploads//ok.txt"), fileID("/mnt/user-data/uploads/ok.txt/"), fileID("mnt/user-data/uploads/ok.txt"),
		fileID("/mnt/user-data/uploads/ok.txt\x00.png"), good + "A", "not*base64", "..", "%2e%2e",
	} {
		for _, m := range []string{"GET", "DELETE"} {
			for _, suffix := range []string{"", "/content"} {
				if m == "DELETE" && suffix != "" {
					continue
				}
				r := s.raw(m, filesAPI+"/"+id+suffix+q, a, nil)
				if r.status != 400 {
					t.Errorf("%s id %q%s: %d %s", m, id, suffix, r.status, r.body)
				}
			}
		}
		if r := s.raw("HEAD", filesAPI+"/"+id+q, a, nil); r.status != 400 {
			t.Errorf("HEAD id %q: %d", id, r.status)
		}
	}
	// Whitespace inside the request line is not an id at all: never a 2xx.
	if r := s.raw("GET", filesAPI+"/"+good+" x"+q, a, nil); r.status < 400 {
		t.Errorf("space in the id: %d", r.status)
	}
	if b, err := os.ReadFile(filepath.Join(d.Uploads, "ok.txt")); err != nil || string(b) != "ok" {
		t.Fatalf("ok.txt changed: %q %v", b, err)
	}
}

func TestFilesAPIHostileSandboxFiles(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "hostile"
	q := "?scope_id=" + scope
	mustStatus(t, "first upload", s.put(a, scope, "outputs/ok.txt", "ok"), 200)
	d := s.hostDirs(a, scope)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	const secretText = "HOST-SECRET-DO-NOT-SERVE"
	if err := os.WriteFile(secret, []byte(secretText), 0o644); err != nil {
		t.Fatal(err)
	}
	content := func(p string) response { return s.do("GET", filesAPI+"/"+fileID(p)+"/content"+q, a, nil) }

	// ln -s /etc/passwd outputs/passwd, made as the sandbox would.
	must(t, os.Symlink("/etc/passwd", filepath.Join(d.Outputs, "passwd")))
	must(t, os.Symlink(secret, filepath.Join(d.Outputs, "secret.txt")))
	must(t, os.Symlink("ok.txt", filepath.Join(d.Outputs, "inside-link.txt"))) // even one that stays inside
	for _, p := range []string{"/mnt/user-data/outputs/passwd", "/mnt/user-data/outputs/secret.txt", "/mnt/user-data/outputs/inside-link.txt"} {
		if r := content(p); r.status != 404 || bytes.Contains(r.body, []byte("root:")) || bytes.Contains(r.body, []byte(secretText)) {
			t.Fatalf("download through symlink %s: %d %s", p, r.status, r.body)
		}
		mustStatus(t, "metadata of symlink "+p, s.do("GET", filesAPI+"/"+fileID(p)+q, a, nil), 404)
		mustStatus(t, "HEAD of symlink "+p, s.do("HEAD", filesAPI+"/"+fileID(p)+q, a, nil), 404)
	}
	if ids := listIDs(t, s.do("GET", filesAPI+q+"&limit=1000", a, nil)); len(ids) != 1 {
		t.Fatalf("listing shows symlinks: %v", ids)
	}
	// Deleting a symlink deletes the link, never its target.
	mustStatus(t, "delete symlink", s.do("DELETE", filesAPI+"/"+fileID("/mnt/user-data/outputs/secret.txt")+q, a, nil), 200)
	if b, err := os.ReadFile(secret); err != nil || string(b) != secretText {
		t.Fatalf("delete followed the symlink: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(d.Outputs, "secret.txt")); !os.IsNotExist(err) {
		t.Fatalf("link not removed: %v", err)
	}

	// A symlinked intermediate folder, out of the folders and within them.
	must(t, os.Symlink(outside, filepath.Join(d.Outputs, "dir")))
	must(t, os.Symlink("../uploads", filepath.Join(d.Outputs, "up")))
	mustStatus(t, "upload for up/", s.put(a, scope, "u.txt", "uploaded"), 200)
	for _, p := range []string{"/mnt/user-data/outputs/dir/secret.txt", "/mnt/user-data/outputs/up/u.txt"} {
		if r := content(p); r.status != 404 || bytes.Contains(r.body, []byte(secretText)) {
			t.Fatalf("download through a symlinked folder %s: %d %s", p, r.status, r.body)
		}
	}
	// Writes through a symlinked folder are refused and land nowhere.
	if r := s.put(a, scope, "outputs/dir/planted.txt", "planted"); r.status < 400 || r.status >= 500 {
		t.Fatalf("write through a symlinked folder: %d %s", r.status, r.body)
	}
	if r := s.upload(a, scope, "path=outputs/dir/planted2.txt", "x", "planted"); r.status < 400 || r.status >= 500 {
		t.Fatalf("upload through a symlinked folder: %d %s", r.status, r.body)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("a write escaped into %s: %v", outside, ents)
	}
	if r := s.do("DELETE", filesAPI+"/"+fileID("/mnt/user-data/outputs/dir/secret.txt")+q, a, nil); r.status != 404 {
		t.Fatalf("delete through a symlinked folder: %d", r.status)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatal("delete through a symlinked folder removed the host file")
	}

	// An upload onto a name the sandbox made a symlink replaces the link.
	victim := filepath.Join(outside, "victim.txt")
	must(t, os.WriteFile(victim, []byte("untouched"), 0o644))
	must(t, os.Symlink(victim, filepath.Join(d.Outputs, "report.csv")))
	mustStatus(t, "put onto a symlink", s.put(a, scope, "outputs/report.csv", "new,data"), 200)
	must(t, os.Symlink(victim, filepath.Join(d.Uploads, "data.csv")))
	mustStatus(t, "upload onto a symlink", s.upload(a, scope, "", "data.csv", "more"), 200)
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Fatalf("a write followed a symlink: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(d.Outputs, "report.csv")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("report.csv is not a regular file now: %v %v", fi, err)
	}

	// A FIFO in outputs answers promptly with a 4xx.
	fifo := filepath.Join(d.Outputs, "pipe.txt")
	must(t, syscall.Mkfifo(fifo, 0o644))
	start := time.Now()
	for _, m := range []string{"GET", "HEAD"} {
		for _, suffix := range []string{"/content", ""} {
			r := s.do(m, filesAPI+"/"+fileID("/mnt/user-data/outputs/pipe.txt")+suffix+q, a, nil)
			if r.status < 400 || r.status >= 500 {
				t.Fatalf("%s FIFO%s: %d %s", m, suffix, r.status, r.body)
			}
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("FIFO requests took %s", el)
	}
	if ids := listIDs(t, s.do("GET", filesAPI+q+"&limit=1000", a, nil)); strings.Contains(strings.Join(ids, ","), fileID("/mnt/user-data/outputs/pipe.txt")) {
		t.Fatal("FIFO listed")
	}
	// Uploading over the FIFO replaces it without blocking.
	done := make(chan response, 1)
	go func() { done <- s.put(a, scope, "outputs/pipe.txt", "now a file") }()
	select {
	case r := <-done:
		mustStatus(t, "put over a FIFO", r, 200)
	case <-time.After(10 * time.Second):
		t.Fatal("put over a FIFO blocked")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFilesAPISymlinkSwapRace swaps a file and a symlink to a host file
// while downloading it hundreds of times: no download ever returns the host
// file's bytes.
func TestFilesAPISymlinkSwapRace(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "race"
	mustStatus(t, "put", s.put(a, scope, "outputs/race.txt", "safe-content"), 200)
	d := s.hostDirs(a, scope)
	secret := filepath.Join(t.TempDir(), "secret.txt")
	must(t, os.WriteFile(secret, []byte("HOST-SECRET"), 0o644))
	target := filepath.Join(d.Outputs, "race.txt")
	tmpLink, tmpFile := filepath.Join(d.Outputs, ".link"), filepath.Join(d.Outputs, ".file")

	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Remove(tmpLink)
			if os.Symlink(secret, tmpLink) == nil && os.Rename(tmpLink, target) == nil {
				swaps.Add(1)
			}
			if os.WriteFile(tmpFile, []byte("safe-content"), 0o644) == nil && os.Rename(tmpFile, target) == nil {
				swaps.Add(1)
			}
		}
	}()
	url := s.base + filesAPI + "/" + fileID("/mnt/user-data/outputs/race.txt") + "/content?scope_id=" + scope
	var ok, refused int
	// At least 400 downloads, and on until the swapper, which a loaded
	// machine may starve, has swapped the file 100 times.
	for i := 0; i < 400 || swaps.Load() < 100 && i < 20000; i++ {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+a)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(b, []byte("HOST-SECRET")) {
			close(stop)
			t.Fatalf("download %d returned the host file", i)
		}
		switch resp.StatusCode {
		case 200:
			if string(b) != "safe-content" {
				t.Fatalf("download %d: %q", i, b)
			}
			ok++
		case 404:
			refused++
		default:
			t.Fatalf("download %d: %d %s", i, resp.StatusCode, b)
		}
	}
	close(stop)
	wg.Wait()
	if swaps.Load() < 100 || ok == 0 || refused == 0 {
		t.Fatalf("the race did not happen: %d swaps, %d served, %d refused", swaps.Load(), ok, refused)
	}
	t.Logf("%d swaps, %d served, %d refused", swaps.Load(), ok, refused)
}

// genReader yields n bytes of a pattern without holding them.
type genReader struct{ n int64 }

func (g *genReader) Read(p []byte) (int, error) {
	if g.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.n {
		p = p[:g.n]
	}
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	g.n -= int64(len(p))
	return len(p), nil
}

// peakHeap runs fn while sampling the heap, and returns how far the heap
// in use rose above where it started.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	if peak.Load() < base {
		return 0
	}
	return peak.Load() - base
}

// streamUpload sends a body of n generated bytes with chunked encoding:
// a multipart upload when multipartName is set, else a PUT at key.
func (s *server) streamUpload(tok, scope, key, multipartName string, n int64) response {
	s.t.Helper()
	pr, pw := io.Pipe()
	ctype := "application/octet-stream"
	method, target := "PUT", s.base+filesAPI+"/"+key+"?scope_id="+scope
	if multipartName != "" {
		mw := multipart.NewWriter(pw)
		ctype, method, target = mw.FormDataContentType(), "POST", s.base+filesAPI+"?scope_id="+scope+"&path="+url.QueryEscape(key)
		go func() {
			fw, err := mw.CreateFormFile("file", multipartName)
			if err == nil {
				_, err = io.Copy(fw, &genReader{n})
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
	} else {
		go func() { _, err := io.Copy(pw, &genReader{n}); pw.CloseWithError(err) }()
	}
	req, _ := http.NewRequest(method, target, pr)
	req.ContentLength = -1 // chunked
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pr.CloseWithError(io.ErrClosedPipe)
	return response{resp.StatusCode, resp.Header, b}
}

func TestFilesAPIStreamedUploadsAndLimits(t *testing.T) {
	s := startServer(t, "", map[string]string{"MAX_UPLOAD_BYTES": "96000000"})
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "big"
	q := "?scope_id=" + scope
	mustStatus(t, "raise the policy cap", s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"uploads": map[string]any{"maxBytes": 1 << 30}}), 200)
	d := func() hostdirs.Dirs { return s.hostDirs(a, scope) }

	// 64 MiB uploads, chunked, multipart and PUT: the heap stays small.
	const size = 64 << 20
	for _, mp := range []string{"big.bin", ""} {
		var r response
		grew := peakHeap(func() { r = s.streamUpload(a, scope, "outputs/big-"+mp+".bin", mp, size) })
		mustStatus(t, "64 MiB upload "+mp, r, 200)
		if r.json(t)["size_bytes"] != float64(size) {
			t.Fatalf("size: %s", r.body)
		}
		if grew > 24<<20 {
			t.Fatalf("a 64 MiB streamed upload (multipart %q) grew the heap by %d MiB", mp, grew>>20)
		}
		t.Logf("64 MiB upload (multipart %q): heap +%.1f MiB", mp, float64(grew)/(1<<20))
	}

	// Over the server's cap (96 MB): 413 in the envelope, nothing stored.
	for _, mp := range []string{"huge.bin", ""} {
		var r response
		grew := peakHeap(func() { r = s.streamUpload(a, scope, "outputs/huge.bin", mp, 200<<20) })
		if r.status != 413 || r.errorType(t) != "invalid_request_error" {
			t.Fatalf("oversized upload (multipart %q): %d %s", mp, r.status, r.body)
		}
		if grew > 24<<20 {
			t.Fatalf("an oversized upload grew the heap by %d MiB", grew>>20)
		}
		mustStatus(t, "nothing stored", s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/huge.bin")+q, a, nil), 404)
	}
	// Under the policy's cap (1 KiB now): 413, including with Content-Length.
	mustStatus(t, "lower the policy cap", s.do("PATCH", "/api/v1/app/org/features", a, map[string]any{"uploads": map[string]any{"maxBytes": 1024}}), 200)
	if r := s.put(a, scope, "small.bin", strings.Repeat("x", 1024)); r.status != 200 {
		t.Fatalf("at the cap: %d %s", r.status, r.body)
	}
	if r := s.put(a, scope, "over.bin", strings.Repeat("x", 1025)); r.status != 413 || !strings.Contains(string(r.body), "1024") {
		t.Fatalf("over the policy cap: %d %s", r.status, r.body)
	}
	if r := s.upload(a, scope, "", "over.bin", strings.Repeat("x", 2000)); r.status != 413 {
		t.Fatalf("multipart over the policy cap: %d %s", r.status, r.body)
	}
	mustStatus(t, "over.bin not stored", s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/over.bin")+q, a, nil), 404)
	// No temporary files are left behind.
	filepath.Walk(d().Root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.Contains(p, "big-") && !strings.HasSuffix(p, "small.bin") {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
	// The server still answers on new connections.
	mustStatus(t, "list after 413s", s.do("GET", filesAPI+q, a, nil), 200)

	// A path field after the file: refused, and nothing kept.
	body, ct := multipartBody(t, mpField{name: "file", filename: "late.txt", value: "x"}, mpField{name: "path", value: "elsewhere.txt"})
	mustStatus(t, "path after file", s.do("POST", filesAPI+q, a, body, "Content-Type", ct), 400)
	mustStatus(t, "late.txt undone", s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/late.txt")+q, a, nil), 404)
	// Not multipart, or no file part.
	mustStatus(t, "json body", s.do("POST", filesAPI+q, a, map[string]any{"file": "x"}), 400)
	body, ct = multipartBody(t, mpField{name: "other", value: "x"})
	mustStatus(t, "no file part", s.do("POST", filesAPI+q, a, body, "Content-Type", ct), 400)
}

func TestFilesAPIHostileFilenames(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "names"
	q := "?scope_id=" + scope
	mustStatus(t, "first", s.put(a, scope, "x.txt", "x"), 200)
	d := s.hostDirs(a, scope)
	names := []string{
		`quote"; filename="evil.html`, "crlf\r\nX-Injected: yes.txt", "отчёт 2026.csv", "back\\slash.txt",
		"percent%22.txt", "semi;colon,comma.txt", "tab\tname.txt", "naïve café.png", "emoji-😀.txt",
	}
	for _, name := range names {
		// Made by the sandbox in outputs (CR/LF can only come that way).
		must(t, os.WriteFile(filepath.Join(d.Outputs, name), []byte("content"), 0o644))
		id := fileID("/mnt/user-data/outputs/" + name)
		for _, suffix := range []string{"/content", "/content?disposition=inline"} {
			target := filesAPI + "/" + id + suffix
			if strings.Contains(suffix, "?") {
				target += "&scope_id=" + scope
			} else {
				target += q
			}
			r := s.raw("GET", target, a, nil)
			mustStatus(t, "download "+name, r, 200)
			if r.header.Get("X-Injected") != "" || len(r.header.Values("Content-Disposition")) != 1 {
				t.Fatalf("header injection through %q: %v", name, r.header)
			}
			cd := r.header.Get("Content-Disposition")
			kind, rest, _ := strings.Cut(cd, "; ")
			fb, ext, ok := strings.Cut(strings.TrimPrefix(rest, `filename="`), `"; filename*=UTF-8''`)
			if (kind != "attachment" && kind != "inline") || !ok || strings.ContainsAny(fb, "\"\\\r\n%") || strings.ContainsAny(ext, " \"';,\r\n\\") {
				t.Fatalf("Content-Disposition for %q: %q", name, cd)
			}
			for i := 0; i < len(cd); i++ {
				if cd[i] < 0x20 || cd[i] > 0x7e {
					t.Fatalf("non-ASCII or control byte in %q", cd)
				}
			}
			if dec, err := url.PathUnescape(ext); err != nil || dec != name {
				t.Fatalf("filename* of %q decodes to %q (%v)", name, dec, err)
			}
		}
		r := s.raw("HEAD", filesAPI+"/"+id+q, a, nil)
		if dec, err := url.PathUnescape(r.header.Get("X-File-Filename")); r.status != 200 || err != nil || dec != name || r.header.Get("X-Injected") != "" {
			t.Fatalf("HEAD of %q: %d %v", name, r.status, r.header)
		}
		// The JSON carries the exact name.
		if r := s.do("GET", filesAPI+"/"+id+q, a, nil); r.json(t)["filename"] != name {
			t.Fatalf("filename of %q: %s", name, r.body)
		}
	}
	// The ASCII fallback of a non-ASCII name.
	r := s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/отчёт 2026.csv")+"/content"+q, a, nil)
	if cd := r.header.Get("Content-Disposition"); cd != `attachment; filename="_____ 2026.csv"; filename*=UTF-8''%D0%BE%D1%82%D1%87%D1%91%D1%82%202026.csv` {
		t.Fatalf("non-ASCII name: %q", cd)
	}
	// Uploads with quoted and RFC 2231-encoded names keep them exactly; CR/LF
	// is refused.
	body, ct := multipartBody(t, mpField{rawDisposition: `form-data; name="file"; filename="say \"hi\".txt"`, value: "q"})
	r = s.do("POST", filesAPI+q, a, body, "Content-Type", ct)
	if r.status != 200 || r.json(t)["filename"] != `say "hi".txt` {
		t.Fatalf("quoted name upload: %d %s", r.status, r.body)
	}
	body, ct = multipartBody(t, mpField{rawDisposition: `form-data; name="file"; filename*=UTF-8''%D0%B4%D0%B0.txt`, value: "q"})
	if r := s.do("POST", filesAPI+q, a, body, "Content-Type", ct); r.status != 200 || r.json(t)["filename"] != "да.txt" {
		t.Fatalf("RFC 2231 name upload: %d %s", r.status, r.body)
	}
	body, ct = multipartBody(t, mpField{rawDisposition: `form-data; name="file"; filename*=UTF-8''a%0D%0AX-Injected%3A%201.txt`, value: "q"})
	if r := s.do("POST", filesAPI+q, a, body, "Content-Type", ct); r.status != 400 {
		t.Fatalf("CR/LF name upload: %d %s", r.status, r.body)
	}
}

// TestFilesAPIKeysAreUTF8: a key whose bytes are not UTF-8, however it is
// sent (a PUT's percent-encoded path, ?path=, a multipart file name, a
// thread's put-file), is refused with 400 before anything is written. Such
// a key was stored: JSON showed its name with U+FFFD in place of the
// bytes, and on PostgreSQL, which refuses the bytes, the upload was
// answered 500 after the file was written.
func TestFilesAPIKeysAreUTF8(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		f := newWSFixture(t, s)
		const scope = "names"
		mustStatus(t, "first", s.put(f.admin, scope, "x.txt", "x"), 200)
		named, ct := multipartBody(t, mpField{rawDisposition: `form-data; name="file"; filename*=UTF-8''a%FFb.txt`, value: "q"})
		keyed, keyedCT := multipartBody(t, mpField{name: "file", filename: "plain.txt", value: "q"})
		cases := []struct {
			name   string
			method string
			target string
			body   []byte
			hdr    []string
		}{
			{"PUT key", "PUT", filesAPI + "/a%FFb.txt?scope_id=" + scope, []byte("q"), nil},
			{"PUT overlong dots", "PUT", filesAPI + "/%C0%AE%C0%AE/x.txt?scope_id=" + scope, []byte("q"), nil},
			{"upload ?path=", "POST", filesAPI + "?scope_id=" + scope + "&path=a%FFb.txt", keyed, []string{"Content-Type", keyedCT}},
			{"upload file name", "POST", filesAPI + "?scope_id=" + scope, named, []string{"Content-Type", ct}},
			{"thread put-file", "PUT", appAPI + "/thread/" + f.tid + "/put-file/a%FFb.txt", []byte("q"), nil},
		}
		for _, tc := range cases {
			r := s.raw(tc.method, tc.target, f.admin, tc.body, tc.hdr...)
			if r.status != 400 || !strings.Contains(string(r.body), "UTF-8") {
				t.Errorf("%s: %d %s, want 400 naming UTF-8", tc.name, r.status, r.body)
			}
		}
		// Nothing was written: each scope holds only what was stored before.
		for _, dirs := range []hostdirs.Dirs{s.hostDirs(f.admin, scope), s.hostDirs(f.admin, f.tid)} {
			for _, dir := range []string{dirs.Uploads, dirs.Outputs} {
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					if e.Name() != "x.txt" {
						t.Errorf("%s holds %q after the refused uploads", dir, e.Name())
					}
				}
			}
		}
	})
}

// TestFilesAPIUnclosedMultipart: a multipart upload whose body ends inside
// a part (cut short, or sent with a Content-Length shorter than the body)
// is refused with 400 and stores nothing: neither the file part it cut,
// which was stored as if complete, nor a whole file followed by a part it
// cut, which was kept though the answer was 400. A file already at the
// key keeps its bytes.
func TestFilesAPIUnclosedMultipart(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "cut"
	mustStatus(t, "first", s.put(a, scope, "kept.txt", "the bytes before"), 200)
	const ct = "multipart/form-data; boundary=XyZ"
	part := func(name, filename, value string) string {
		disp := `form-data; name="` + name + `"`
		if filename != "" {
			disp += `; filename="` + filename + `"`
		}
		return "--XyZ\r\nContent-Disposition: " + disp + "\r\n\r\n" + value
	}
	cases := []struct {
		name, body string
	}{
		{"the file part cut", part("file", "cut.txt", "the start of a longer file")},
		{"the file part cut inside the boundary", part("file", "cut.txt", "the start of a longer file") + "\r\n--Xy"},
		{"an existing key's file part cut", part("file", "kept.txt", "the start of new bytes")},
		{"a field after the file cut", part("file", "cut.txt", "whole") + "\r\n" + part("note", "", "cut")},
	}
	d := s.hostDirs(a, scope)
	for _, tc := range cases {
		r := s.raw("POST", filesAPI+"?scope_id="+scope, a, []byte(tc.body), "Content-Type", ct)
		if r.status != 400 || !strings.Contains(string(r.body), "malformed multipart body") {
			t.Errorf("%s: %d %s, want 400 malformed multipart body", tc.name, r.status, r.body)
		}
		if _, err := os.Stat(filepath.Join(d.Uploads, "cut.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: cut.txt was stored (%v)", tc.name, err)
			os.Remove(filepath.Join(d.Uploads, "cut.txt"))
		}
		if b, err := os.ReadFile(filepath.Join(d.Uploads, "kept.txt")); err != nil || string(b) != "the bytes before" {
			t.Errorf("%s: kept.txt holds %q (%v), want the bytes before", tc.name, b, err)
		}
	}
	// The same body, closed, is stored.
	r := s.raw("POST", filesAPI+"?scope_id="+scope, a, []byte(part("file", "cut.txt", "whole")+"\r\n--XyZ--\r\n"), "Content-Type", ct)
	mustStatus(t, "closed body", r, 200)
}

func TestFilesAPIAccessOtherUsersAndOrgs(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		other := s.bootstrap("globex", "admin@globex.test")
		mustStatus(t, "create member", s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"}), 201)
		m := login(t, s, "m@acme.test", "member-password")

		pid := s.do("POST", "/api/v1/app/project", a, map[string]any{"name": "P"}).json(t)["id"].(string)
		tid := s.do("POST", "/api/v1/app/thread", a, map[string]any{"project_id": pid, "title": "T"}).json(t)["id"].(string)
		for _, scope := range []string{"shared-name", tid} {
			mustStatus(t, "seed upload", s.put(a, scope, "secret.txt", "a's secret"), 200)
			mustStatus(t, "seed output", s.put(a, scope, "outputs/out.txt", "a's output"), 200)
		}
		state := func(scope string) string {
			d := s.hostDirs(a, scope)
			var b strings.Builder
			filepath.Walk(d.Root, func(p string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					c, _ := os.ReadFile(p)
					fmt.Fprintf(&b, "%s=%s\n", strings.TrimPrefix(p, d.Root), c)
				}
				return nil
			})
			return b.String()
		}
		before := map[string]string{"shared-name": state("shared-name"), tid: state(tid)}
		up, out := fileID("/mnt/user-data/uploads/secret.txt"), fileID("/mnt/user-data/outputs/out.txt")

		for who, tok := range map[string]string{"member of the org": m, "admin of another org": other} {
			// A thread of someone else: every endpoint is a 404, uploads included.
			q := "?scope_id=" + tid
			for _, c := range []struct {
				method, path string
				body         any
			}{
				{"GET", filesAPI + q, nil}, {"GET", filesAPI + "/" + up + q, nil}, {"HEAD", filesAPI + "/" + up + q, nil},
				{"GET", filesAPI + "/" + up + "/content" + q, nil}, {"GET", filesAPI + "/" + out + "/content" + q, nil},
				{"DELETE", filesAPI + "/" + up + q, nil}, {"DELETE", filesAPI + q + "&prefix=s", nil},
				{"PUT", filesAPI + "/secret.txt" + q, "overwritten"},
			} {
				r := s.do(c.method, c.path, tok, c.body)
				if r.status != 404 || (c.method != "HEAD" && r.errorType(t) != "not_found_error") {
					t.Fatalf("%s: %s %s: %d %s", who, c.method, c.path, r.status, r.body)
				}
			}
			if r := s.upload(tok, tid, "", "secret.txt", "overwritten"); r.status != 404 {
				t.Fatalf("%s: upload into another's thread: %d %s", who, r.status, r.body)
			}
			// The same client-chosen container name is another container.
			q = "?scope_id=shared-name"
			mustStatus(t, who+": list own unused container", s.do("GET", filesAPI+q, tok, nil), 404)
			mustStatus(t, who+": metadata", s.do("GET", filesAPI+"/"+up+q, tok, nil), 404)
			mustStatus(t, who+": content", s.do("GET", filesAPI+"/"+up+"/content"+q, tok, nil), 404)
			mustStatus(t, who+": delete", s.do("DELETE", filesAPI+"/"+up+q, tok, nil), 404)
			r := s.put(tok, "shared-name", "secret.txt", "mine")
			mustStatus(t, who+": put into own namesake", r, 200)
			if ids := listIDs(t, s.do("GET", filesAPI+q, tok, nil)); len(ids) != 1 {
				t.Fatalf("%s sees %v", who, ids)
			}
			mustStatus(t, who+": delete own", s.do("DELETE", filesAPI+q+"&prefix=s", tok, nil), 200)
			// Another org's scope: a container id of another user is not a
			// way in either.
			me := s.do("GET", "/api/v1/app/me", a, nil).json(t)
			storage := container.UserScopedID(me["user_id"].(string), "shared-name")
			mustStatus(t, who+": storage id as scope", s.do("GET", filesAPI+"/"+up+"?scope_id="+url.QueryEscape(storage), tok, nil), 404)
		}
		for scope, want := range before {
			if got := state(scope); got != want {
				t.Fatalf("%s changed:\n%s\nwant\n%s", scope, got, want)
			}
		}
		// The owner still reads both.
		r := s.do("GET", filesAPI+"/"+up+"/content?scope_id="+tid, a, nil)
		if r.status != 200 || string(r.body) != "a's secret" {
			t.Fatalf("owner: %d %s", r.status, r.body)
		}
	})
}

func TestFilesAPIPolicySwitches(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		mustStatus(t, "create member", s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"}), 201)
		m := login(t, s, "m@acme.test", "member-password")
		const scope = "pol"
		q := "?scope_id=" + scope
		mustStatus(t, "seed upload", s.put(m, scope, "in.txt", "uploaded"), 200)
		mustStatus(t, "seed output", s.put(m, scope, "outputs/out.txt", "generated"), 200)
		must(t, os.WriteFile(filepath.Join(s.hostDirs(m, scope).Workspace, "w.txt"), []byte("workspace"), 0o644))
		up, out, ws := fileID("/mnt/user-data/uploads/in.txt"), fileID("/mnt/user-data/outputs/out.txt"), fileID("/home/agent/workspace/w.txt")
		patch := func(body map[string]any) {
			t.Helper()
			mustStatus(t, "patch features", s.do("PATCH", "/api/v1/app/org/features", a, body), 200)
		}
		refused := func(what string, r response, feature string) {
			t.Helper()
			if r.status != 403 || r.errorType(t) != "permission_error" || !strings.Contains(r.json(t)["error"].(map[string]any)["message"].(string), feature) {
				t.Fatalf("%s: want 403 naming %s, got %d %s", what, feature, r.status, r.body)
			}
		}
		uploads := map[string]func() response{
			"POST":         func() response { return s.upload(m, scope, "", "new.txt", "n") },
			"POST path=":   func() response { return s.upload(m, scope, "path=outputs/new.txt", "x", "n") },
			"PUT":          func() response { return s.put(m, scope, "new2.txt", "n") },
			"PUT outputs":  func() response { return s.put(m, scope, "outputs/new2.txt", "n") },
			"chunked PUT":  func() response { return s.streamUpload(m, scope, "new3.txt", "", 1<<20) },
			"chunked POST": func() response { return s.streamUpload(m, scope, "new4.txt", "new4.txt", 1<<20) },
			"POST idem-key": func() response {
				return s.upload(m, scope, "", "new5.txt", "n", "Idempotency-Key", "k-"+fmt.Sprint(time.Now().UnixNano()))
			},
		}
		content := func(id string) response { return s.do("GET", filesAPI+"/"+id+"/content"+q, m, nil) }
		unaffected := func(what string) {
			t.Helper()
			mustStatus(t, what+": list", s.do("GET", filesAPI+q, m, nil), 200)
			mustStatus(t, what+": metadata", s.do("GET", filesAPI+"/"+up+q, m, nil), 200)
			mustStatus(t, what+": head", s.do("HEAD", filesAPI+"/"+out+q, m, nil), 200)
		}

		// uploads.enabled off: every upload path is refused and stores nothing.
		patch(map[string]any{"uploads": map[string]any{"enabled": false}})
		for name, fn := range uploads {
			refused("uploads off: "+name, fn(), `"uploads"`)
		}
		if ids := listIDs(t, s.do("GET", filesAPI+q, m, nil)); len(ids) != 2 {
			t.Fatalf("refused uploads stored files: %v", ids)
		}
		for _, id := range []string{up, out, ws} {
			mustStatus(t, "uploads off: download", content(id), 200)
		}
		unaffected("uploads off")
		patch(map[string]any{"uploads": map[string]any{"enabled": true}})
		for name, fn := range uploads {
			mustStatus(t, "uploads on: "+name, fn(), 200)
		}

		// downloads.generated off: outputs and workspace files, not uploads.
		patch(map[string]any{"downloads": map[string]any{"generated": false}})
		refused("generated off: output", content(out), `"downloads.generated"`)
		refused("generated off: workspace", content(ws), `"downloads.generated"`)
		refused("generated off: output inline", s.do("GET", filesAPI+"/"+out+"/content"+q+"&disposition=inline", m, nil), `"downloads.generated"`)
		if r := s.do("HEAD", filesAPI+"/"+out+"/content"+q, m, nil); r.status != 403 {
			t.Fatalf("generated off: HEAD content: %d", r.status)
		}
		if r := content(up); r.status != 200 || string(r.body) != "uploaded" {
			t.Fatalf("generated off: upload download: %d %s", r.status, r.body)
		}
		unaffected("generated off")
		patch(map[string]any{"downloads": map[string]any{"generated": true}})
		if r := content(out); r.status != 200 || string(r.body) != "generated" {
			t.Fatalf("generated on: %d %s", r.status, r.body)
		}

		// downloads.uploaded off: uploads only.
		patch(map[string]any{"downloads": map[string]any{"uploaded": false}})
		refused("uploaded off: upload", content(up), `"downloads.uploaded"`)
		refused("uploaded off: ranged", s.do("GET", filesAPI+"/"+up+"/content"+q, m, nil, "Range", "bytes=0-1"), `"downloads.uploaded"`)
		mustStatus(t, "uploaded off: output", content(out), 200)
		mustStatus(t, "uploaded off: workspace", content(ws), 200)
		unaffected("uploaded off")
		patch(map[string]any{"downloads": map[string]any{"uploaded": true}})
		mustStatus(t, "uploaded on", content(up), 200)

		// Deletes are not gated.
		patch(map[string]any{"uploads": map[string]any{"enabled": false}, "downloads": map[string]any{"generated": false, "uploaded": false}})
		mustStatus(t, "delete with everything off", s.do("DELETE", filesAPI+"/"+up+q, m, nil), 200)
		mustStatus(t, "delete prefix with everything off", s.do("DELETE", filesAPI+q+"&prefix=new", m, nil), 200)
	})
}

func TestFilesAPIRangesAndIdempotency(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	const scope = "rng"
	q := "?scope_id=" + scope
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte('A' + i%26)
	}
	r := s.put(a, scope, "outputs/data.bin", string(data))
	mustStatus(t, "put", r, 200)
	etag := r.json(t)["etag"].(string)
	path := filesAPI + "/" + fileID("/mnt/user-data/outputs/data.bin") + "/content" + q
	for _, c := range []struct {
		rng, ifRange string
		status       int
		from, to     int // the bytes served, [from, to)
	}{
		{"bytes=0-9", "", 206, 0, 10},
		{"bytes=990-", "", 206, 990, 1000},
		{"bytes=-5", "", 206, 995, 1000},
		{"bytes=-5000", "", 206, 0, 1000},
		{"bytes=995-2000", "", 206, 995, 1000},
		{"bytes=999-999", "", 206, 999, 1000},
		{"bytes=0-9", `"` + etag + `"`, 206, 0, 10},
		{"bytes=0-9", `"stale"`, 200, 0, 1000},
		{"bytes=5-2", "", 200, 0, 1000},
		{"bytes=0-1,5-6", "", 200, 0, 1000},
		{"items=0-1", "", 200, 0, 1000},
		{"bytes=x-1", "", 200, 0, 1000},
		{"bytes=1000-", "", 416, 0, 0},
		{"bytes=5000-6000", "", 416, 0, 0},
		{"bytes=-0", "", 416, 0, 0},
	} {
		hdr := []string{"Range", c.rng}
		if c.ifRange != "" {
			hdr = append(hdr, "If-Range", c.ifRange)
		}
		r := s.do("GET", path, a, nil, hdr...)
		if r.status != c.status {
			t.Fatalf("%s (If-Range %s): %d %s", c.rng, c.ifRange, r.status, r.body)
		}
		switch c.status {
		case 206:
			want := fmt.Sprintf("bytes %d-%d/1000", c.from, c.to-1)
			if !bytes.Equal(r.body, data[c.from:c.to]) || r.header.Get("Content-Range") != want || r.header.Get("Content-Length") != fmt.Sprint(c.to-c.from) {
				t.Fatalf("%s: %v %q", c.rng, r.header, r.body)
			}
		case 200:
			if !bytes.Equal(r.body, data) {
				t.Fatalf("%s: body of %d bytes", c.rng, len(r.body))
			}
		case 416:
			if r.header.Get("Content-Range") != "bytes */1000" || r.errorType(t) != "invalid_request_error" {
				t.Fatalf("%s: %v %s", c.rng, r.header, r.body)
			}
		}
		if r.header.Get("Accept-Ranges") != "bytes" && c.status != 416 {
			t.Fatalf("no Accept-Ranges: %v", r.header)
		}
	}
	// HEAD of the content: the headers, no body.
	r = s.do("HEAD", path, a, nil)
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "1000" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("HEAD content: %d %v", r.status, r.header)
	}
	// Several downloads on one keep-alive connection: the stream is
	// exactly Content-Length long each time.
	for i := 0; i < 5; i++ {
		if r := s.do("GET", path, a, nil); !bytes.Equal(r.body, data) {
			t.Fatalf("download %d: %d bytes", i, len(r.body))
		}
	}
	// An empty file.
	mustStatus(t, "empty", s.put(a, scope, "outputs/empty.txt", ""), 200)
	r = s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/empty.txt")+"/content"+q, a, nil)
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "0" {
		t.Fatalf("empty: %d %v", r.status, r.header)
	}
	mustStatus(t, "range of empty", s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/outputs/empty.txt")+"/content"+q, a, nil, "Range", "bytes=0-"), 416)

	// Idempotency-Key: a retry returns the first result and stores nothing.
	first := s.upload(a, scope, "", "once.txt", "first", "Idempotency-Key", "key-1")
	mustStatus(t, "first", first, 200)
	again := s.upload(a, scope, "", "once.txt", "second", "Idempotency-Key", "key-1")
	mustStatus(t, "retry", again, 200)
	if string(again.body) != string(first.body) {
		t.Fatalf("retry returned another object:\n%s\n%s", first.body, again.body)
	}
	if r := s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/once.txt")+"/content"+q, a, nil); string(r.body) != "first" {
		t.Fatalf("the retry stored again: %q", r.body)
	}
	if r := s.upload(a, scope, "", "other.txt", "x", "Idempotency-Key", "key-1"); r.status != 409 {
		t.Fatalf("key reused for another file: %d %s", r.status, r.body)
	}
	if r := s.upload(a, "other-scope", "", "once.txt", "x", "Idempotency-Key", "key-1"); r.status != 409 {
		t.Fatalf("key reused for another scope: %d %s", r.status, r.body)
	}
	if r := s.upload(a, scope, "", "once.txt", "third", "Idempotency-Key", "key-2"); r.status != 200 {
		t.Fatalf("a new key: %d %s", r.status, r.body)
	}
	if r := s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/once.txt")+"/content"+q, a, nil); string(r.body) != "third" {
		t.Fatalf("a new key did not store: %q", r.body)
	}
	// Another user's identical key is theirs alone.
	mustStatus(t, "create member", s.do("POST", "/api/v1/app/org/users", a, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"}), 201)
	m := login(t, s, "m@acme.test", "member-password")
	if r := s.upload(m, scope, "", "once.txt", "member's", "Idempotency-Key", "key-1"); r.status != 200 || r.json(t)["size_bytes"] != float64(8) {
		t.Fatalf("member with the same key: %d %s", r.status, r.body)
	}
	// A large retried upload is answered and the connection stays usable.
	for i := 0; i < 2; i++ {
		r := s.streamUpload(a, scope, "outputs/idem.bin", "", 4<<20)
		mustStatus(t, "streamed put", r, 200)
	}
}

// TestIdempotencyKeySurvivesRestart: an upload retried with its
// Idempotency-Key after the server restarted (a retry after a crash or a
// deploy) gets the first answer and stores nothing, on both databases.
func TestIdempotencyKeySurvivesRestart(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		const scope = "idem"
		first := s.upload(a, scope, "", "once.txt", "first", "Idempotency-Key", "retry-me")
		mustStatus(t, "first", first, 200)
		s.stop()

		s2 := startServer(t, dbURL, map[string]string{"DATA_DIR": s.dataDir, "THREADBOX_INSTANCE": s.env["THREADBOX_INSTANCE"]})
		again := s2.upload(a, scope, "", "once.txt", "second", "Idempotency-Key", "retry-me")
		mustStatus(t, "retry after restart", again, 200)
		if string(again.body) != string(first.body) {
			t.Fatalf("retry after restart answered another object:\n%s\n%s", first.body, again.body)
		}
		r := s2.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/once.txt")+"/content?scope_id="+scope, a, nil)
		if string(r.body) != "first" {
			t.Fatalf("the retry stored again: %d %q", r.status, r.body)
		}
		if r := s2.upload(a, scope, "", "other.txt", "x", "Idempotency-Key", "retry-me"); r.status != 409 {
			t.Fatalf("key reused for another file after restart: %d %s", r.status, r.body)
		}
	})
}
