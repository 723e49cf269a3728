package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const appAPI = "/api/v1/app"

// wsUpload builds a multipart body with an optional "path" field before
// the "file" part.
func wsUpload(t *testing.T, key, filename, content string) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if key != "" {
		if err := w.WriteField("path", key); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := w.CreateFormFile("file", filename)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(content))
	w.Close()
	return b.Bytes(), w.FormDataContentType()
}

type wsEntry struct {
	name, body string
	mode       fs.FileMode
}

func wsZip(t *testing.T, es ...wsEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		fw, err := w.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(e.body))
	}
	w.Close()
	return b.Bytes()
}

func wsManifest(name, desc string) string {
	return fmt.Sprintf("---\nname: %s\ndescription: %s\n---\n# %s\n", name, desc, name)
}

// wsFixture is an org admin with a project and a thread, an org member and
// an admin of another org.
type wsFixture struct {
	s                  *server
	admin, member, out string
	pid, tid           string
}

func newWSFixture(t *testing.T, s *server) wsFixture {
	t.Helper()
	f := wsFixture{s: s, admin: s.bootstrap("acme", "admin@acme.test"), out: s.bootstrap("globex", "admin@globex.test")}
	if r := s.do("POST", appAPI+"/org/users", f.admin, map[string]any{"email": "m@acme.test", "role": "member", "password": "member-password"}); r.status != 201 && r.status != 200 {
		t.Fatalf("create member: %d %s", r.status, r.body)
	}
	f.member = login(t, s, "m@acme.test", "member-password")
	r := s.do("POST", appAPI+"/project", f.admin, map[string]any{"name": "Research"})
	if r.status != 201 {
		t.Fatalf("project: %d %s", r.status, r.body)
	}
	f.pid = r.json(t)["id"].(string)
	f.tid = f.thread(t, f.admin, f.pid)
	return f
}

func (f wsFixture) thread(t *testing.T, tok, pid string) string {
	t.Helper()
	r := f.s.do("POST", appAPI+"/thread", tok, map[string]any{"project_id": pid, "title": "Analysis"})
	if r.status != 201 {
		t.Fatalf("thread: %d %s", r.status, r.body)
	}
	return r.json(t)["id"].(string)
}

func (f wsFixture) upload(t *testing.T, tok, tid, key, name, content string) response {
	t.Helper()
	body, ct := wsUpload(t, key, name, content)
	return f.s.do("POST", appAPI+"/thread/"+tid+"/upload-file", tok, body, "Content-Type", ct)
}

func (f wsFixture) download(tok, tid, path string) response {
	return f.s.do("GET", appAPI+"/thread/"+tid+"/download-file?path="+path, tok, nil)
}

func (f wsFixture) history(t *testing.T, tok, tid string) []any {
	t.Helper()
	r := f.s.do("GET", appAPI+"/thread/"+tid+"/messages", tok, nil)
	if r.status != 200 {
		t.Fatalf("history: %d %s", r.status, r.body)
	}
	return r.json(t)["data"].([]any)
}

func (f wsFixture) patchFeatures(t *testing.T, patch map[string]any) {
	t.Helper()
	if r := f.s.do("PATCH", appAPI+"/org/features", f.admin, patch); r.status != 200 {
		t.Fatalf("patch features %v: %d %s", patch, r.status, r.body)
	}
}

// TestWorkspaceThreadsFilesSkillsIsolation covers the thread file routes,
// a turn without code, history, fork and delete, skills, and that another
// user's or another org's ids are not found and change nothing.
func TestWorkspaceThreadsFilesSkillsIsolation(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a, tid := f.admin, f.tid

		// Thread files: upload (key and file name), put, download by path.
		if r := f.upload(t, a, tid, "notes/a.txt", "a.txt", "alpha"); r.status != 200 || r.json(t)["scope"].(map[string]any)["id"] != tid {
			t.Fatalf("upload-file: %d %s", r.status, r.body)
		}
		if r := f.upload(t, a, tid, "", "plain.txt", "plain"); r.status != 200 || r.json(t)["filename"] != "plain.txt" {
			t.Fatalf("upload-file by name: %d %s", r.status, r.body)
		}
		// upload-file stores into uploads; outputs are what code made.
		if r := f.upload(t, a, tid, "outputs/fake.txt", "fake.txt", "x"); r.status != 400 || !strings.Contains(string(r.body), "/mnt/user-data/uploads/") {
			t.Fatalf("upload-file into outputs: %d %s", r.status, r.body)
		}
		if r := f.download(a, tid, "/mnt/user-data/outputs/fake.txt"); r.status != 404 {
			t.Fatalf("a refused upload-file stored: %d %s", r.status, r.body)
		}
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/outputs/report.txt", a, "report body"); r.status != 200 || r.json(t)["downloadable"] != true {
			t.Fatalf("put-file: %d %s", r.status, r.body)
		}
		if r := f.download(a, tid, "/mnt/user-data/uploads/notes/a.txt"); r.status != 200 || string(r.body) != "alpha" ||
			r.header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("download upload: %d %q %v", r.status, r.body, r.header)
		}
		if r := f.download(a, tid, "/mnt/user-data/outputs/report.txt"); r.status != 200 || string(r.body) != "report body" {
			t.Fatalf("download output: %d %q", r.status, r.body)
		}
		for _, p := range []string{"/home/agent/workspace/x.txt", "/mnt/skills/x/SKILL.md", "/etc/passwd", "/mnt/user-data/uploads/../../../etc/passwd", "/mnt/user-data/uploads"} {
			if r := f.download(a, tid, p); r.status != 400 {
				t.Errorf("download %s: want 400, got %d %s", p, r.status, r.body)
			}
		}
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/..%2f..%2fescape", a, "x"); r.status != 400 {
			t.Errorf("put-file traversal: %d %s", r.status, r.body)
		}
		// The key is a URL path: unescaped once, as the Files API's PUT does.
		if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/my%20r%C3%A9sum%C3%A9.txt", a, "cv"); r.status != 200 || r.json(t)["filename"] != "my résumé.txt" {
			t.Errorf("put-file with an escaped key: %d %s", r.status, r.body)
		}
		if r := f.download(a, tid, url.QueryEscape("/mnt/user-data/uploads/my résumé.txt")); r.status != 200 || string(r.body) != "cv" {
			t.Errorf("download of the escaped key: %d %q", r.status, r.body)
		}

		// A turn without code answers and is stored, complete.
		r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "hello there"})
		if r.status != 200 {
			t.Fatalf("turn: %d %s", r.status, r.body)
		}
		if resp := r.json(t); resp["type"] != "message" || resp["stop_reason"] != "end_turn" {
			t.Fatalf("turn response: %s", r.body)
		}
		hist := f.history(t, a, tid)
		if len(hist) != 2 || hist[0].(map[string]any)["role"] != "user" || hist[1].(map[string]any)["role"] != "assistant" || hist[1].(map[string]any)["complete"] != true {
			t.Fatalf("history: %v", hist)
		}

		// Skills: admins upload; each upload is a new version.
		arch := wsZip(t, wsEntry{name: "SKILL.md", body: wsManifest("csv-report", "Summarise CSV files")}, wsEntry{name: "tool.py", body: "print('hi')"})
		r = s.do("POST", appAPI+"/skills", a, arch, "Content-Type", "application/zip")
		if r.status != 201 || r.json(t)["name"] != "csv-report" || r.json(t)["version"] != float64(1) {
			t.Fatalf("upload skill: %d %s", r.status, r.body)
		}
		skillID := r.json(t)["id"].(string)
		if r := s.do("POST", appAPI+"/skills", a, arch, "Content-Type", "application/zip"); r.status != 201 || r.json(t)["version"] != float64(2) {
			t.Fatalf("second upload: %d %s", r.status, r.body)
		}
		if r := s.do("POST", appAPI+"/skills", f.member, arch, "Content-Type", "application/zip"); r.status != 403 {
			t.Fatalf("member upload: %d %s", r.status, r.body)
		}

		// Another org and another user of the org: not found, nothing changes.
		other := f.thread(t, f.out, s.do("POST", appAPI+"/project", f.out, map[string]any{"name": "Theirs"}).json(t)["id"].(string))
		uploadBody, uploadCT := wsUpload(t, "pwned.txt", "pwned.txt", "pwned")
		for _, tok := range []string{f.out, f.member} {
			for _, c := range []struct {
				method, path string
				body         any
				hdr          []string
			}{
				{"POST", "/thread/" + tid + "/upload-file", uploadBody, []string{"Content-Type", uploadCT}},
				{"PUT", "/thread/" + tid + "/put-file/pwned.txt", "pwned", nil},
				{"GET", "/thread/" + tid + "/download-file?path=/mnt/user-data/uploads/notes/a.txt", nil, nil},
				{"POST", "/thread/" + tid + "/messages", map[string]any{"content": "pwned"}, nil},
				{"GET", "/thread/" + tid + "/messages", nil, nil},
				{"POST", "/thread/" + tid + "/fork", nil, nil},
				{"DELETE", "/thread/" + tid, nil, nil},
				{"GET", "/project/" + f.pid + "/artifacts", nil, nil},
				{"GET", "/artifact/art_missing", nil, nil},
				{"GET", "/artifact/art_missing/content", nil, nil},
				{"GET", "/thread/thr_missing/messages", nil, nil},
			} {
				if tok == f.member && strings.HasPrefix(c.path, "/project/") {
					continue // the project is the org's: members see it
				}
				r := s.do(c.method, appAPI+c.path, tok, c.body, c.hdr...)
				if r.status != 404 || r.errorType(t) != "not_found_error" {
					t.Errorf("%s %s by another user: want 404, got %d %s", c.method, c.path, r.status, r.body)
				}
			}
		}
		if r := s.do("DELETE", appAPI+"/skills/"+skillID, f.out, nil); r.status != 404 {
			t.Errorf("delete another org's skill: %d %s", r.status, r.body)
		}
		if r := s.do("POST", appAPI+"/thread/"+other+"/messages", f.out, map[string]any{"content": "x", "skills": []string{skillID}}); r.status != 404 {
			t.Errorf("turn naming another org's skill: %d %s", r.status, r.body)
		}
		// Ids in bodies and queries never override the path.
		if r := s.do("POST", appAPI+"/thread/"+other+"/messages", f.out, map[string]any{"content": "mine", "thread_id": tid, "threadId": tid}); r.status != 200 {
			t.Fatalf("turn in own thread: %d %s", r.status, r.body)
		}
		body, ct := wsUpload(t, "", "theirs.txt", "theirs")
		if r := s.do("POST", appAPI+"/thread/"+other+"/upload-file?scope_id="+tid, f.out, body, "Content-Type", ct); r.status != 200 || r.json(t)["scope"].(map[string]any)["id"] != other {
			t.Fatalf("upload with a foreign scope_id: %d %s", r.status, r.body)
		}
		if got := f.history(t, a, tid); len(got) != 2 {
			t.Fatalf("another org's calls changed the history: %d messages", len(got))
		}
		if r := f.download(a, tid, "/mnt/user-data/uploads/theirs.txt"); r.status != 404 {
			t.Fatalf("a file landed in the wrong thread: %d", r.status)
		}
		if r := f.download(a, tid, "/mnt/user-data/uploads/pwned.txt"); r.status != 404 {
			t.Fatalf("another user wrote into the thread: %d", r.status)
		}
		if r := s.do("GET", appAPI+"/skills", a, nil); len(r.json(t)["data"].([]any)) != 2 {
			t.Fatalf("skills changed: %s", r.body)
		}

		// Fork copies history and files; delete removes the thread's files.
		r = s.do("POST", appAPI+"/thread/"+tid+"/fork", a, map[string]any{"project_id": "prj_other"})
		if r.status != 201 || r.json(t)["project_id"] != f.pid {
			t.Fatalf("fork: %d %s", r.status, r.body)
		}
		fork := r.json(t)["id"].(string)
		if got := f.history(t, a, fork); len(got) != 2 {
			t.Fatalf("fork history: %v", got)
		}
		if r := f.download(a, fork, "/mnt/user-data/uploads/notes/a.txt"); r.status != 200 || string(r.body) != "alpha" {
			t.Fatalf("fork files: %d %q", r.status, r.body)
		}
		if r := s.do("DELETE", appAPI+"/thread/"+fork, a, nil); r.status != 204 {
			t.Fatalf("delete fork: %d %s", r.status, r.body)
		}
		if _, err := os.Stat(filepath.Join(s.dataDir, "containers", fork)); !os.IsNotExist(err) {
			t.Fatalf("deleted thread's files remain: %v", err)
		}
		if r := f.download(a, tid, "/mnt/user-data/uploads/notes/a.txt"); r.status != 200 {
			t.Fatalf("deleting the fork touched the original: %d", r.status)
		}

		// Skill delete: admins only, every version and its files.
		if r := s.do("DELETE", appAPI+"/skills/"+skillID, f.member, nil); r.status != 403 {
			t.Fatalf("member delete: %d", r.status)
		}
		if r := s.do("DELETE", appAPI+"/skills/"+skillID, a, nil); r.status != 200 {
			t.Fatalf("delete skill: %d %s", r.status, r.body)
		}
		if r := s.do("GET", appAPI+"/skills", a, nil); len(r.json(t)["data"].([]any)) != 0 {
			t.Fatalf("skills left: %s", r.body)
		}
	})
}

// TestWorkspaceSkillArchiveRefused: a traversal entry or a link refuses the
// whole archive and nothing is written.
func TestWorkspaceSkillArchiveRefused(t *testing.T) {
	s := startServer(t, "", nil)
	a := s.bootstrap("acme", "admin@acme.test")
	good := wsEntry{name: "SKILL.md", body: wsManifest("evil", "Looks fine")}
	for name, arch := range map[string][]byte{
		"dot-dot":        wsZip(t, good, wsEntry{name: "../../escape.sh", body: "rm -rf /"}),
		"nested dot-dot": wsZip(t, good, wsEntry{name: "bin/../../escape.sh", body: "x"}),
		"symlink":        wsZip(t, good, wsEntry{name: "passwd", body: "/etc/passwd", mode: fs.ModeSymlink | 0o777}),
	} {
		r := s.do("POST", appAPI+"/skills", a, arch, "Content-Type", "application/zip")
		if r.status != 400 || r.errorType(t) != "invalid_request_error" {
			t.Errorf("%s: want 400, got %d %s", name, r.status, r.body)
		}
	}
	if r := s.do("GET", appAPI+"/skills", a, nil); len(r.json(t)["data"].([]any)) != 0 {
		t.Fatalf("a refused skill was recorded: %s", r.body)
	}
	var written []string
	filepath.WalkDir(filepath.Join(s.dataDir, "skills"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			written = append(written, p)
		}
		return nil
	})
	if len(written) != 0 {
		t.Fatalf("refused archives wrote files: %v", written)
	}
	for _, p := range []string{filepath.Join(s.dataDir, "escape.sh"), filepath.Join(filepath.Dir(s.dataDir), "escape.sh")} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("traversal wrote %s", p)
		}
	}
}

// TestWorkspacePolicySwitches: each switch through every path that reaches
// a file (Files API, thread download, thread uploads), code execution off
// in the workspace pipeline, and each change recorded in the audit log.
func TestWorkspacePolicySwitches(t *testing.T) {
	s := startServer(t, "", nil)
	f := newWSFixture(t, s)
	a, tid := f.admin, f.tid
	if r := f.upload(t, a, tid, "in.txt", "in.txt", "input"); r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/outputs/out.txt", a, "output"); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	enc := func(p string) string { return base64.RawURLEncoding.EncodeToString([]byte(p)) }
	filesContent := func(p string) response {
		return s.do("GET", "/api/gpt/v1/files/"+enc(p)+"/content?scope_id="+tid, a, nil)
	}
	refused := func(r response, feature string) bool {
		return r.status == 403 && r.errorType(t) == "permission_error" && strings.Contains(string(r.body), feature)
	}
	patches := 0
	set := func(patch map[string]any) { f.patchFeatures(t, patch); patches++ }

	set(map[string]any{"downloads": map[string]any{"uploaded": false}})
	if r := f.download(a, tid, "/mnt/user-data/uploads/in.txt"); !refused(r, "downloads.uploaded") {
		t.Errorf("thread download of an upload: %d %s", r.status, r.body)
	}
	if r := filesContent("/mnt/user-data/uploads/in.txt"); !refused(r, "downloads.uploaded") {
		t.Errorf("Files API download of an upload: %d %s", r.status, r.body)
	}
	if r := f.download(a, tid, "/mnt/user-data/outputs/out.txt"); r.status != 200 {
		t.Errorf("outputs gated by the uploads switch: %d", r.status)
	}
	set(map[string]any{"downloads": map[string]any{"uploaded": true, "generated": false}})
	if r := f.download(a, tid, "/mnt/user-data/outputs/out.txt"); !refused(r, "downloads.generated") {
		t.Errorf("thread download of an output: %d %s", r.status, r.body)
	}
	if r := filesContent("/mnt/user-data/outputs/out.txt"); !refused(r, "downloads.generated") {
		t.Errorf("Files API download of an output: %d %s", r.status, r.body)
	}
	if r := f.download(a, tid, "/mnt/user-data/uploads/in.txt"); r.status != 200 {
		t.Errorf("uploads gated by the generated switch: %d", r.status)
	}
	set(map[string]any{"downloads": map[string]any{"generated": true}, "uploads": map[string]any{"enabled": false}})
	if r := f.upload(t, a, tid, "", "new.txt", "x"); !refused(r, "uploads") {
		t.Errorf("upload-file with uploads off: %d %s", r.status, r.body)
	}
	if r := s.do("PUT", appAPI+"/thread/"+tid+"/put-file/new.txt", a, "x"); !refused(r, "uploads") {
		t.Errorf("put-file with uploads off: %d %s", r.status, r.body)
	}
	if r := s.do("PUT", "/api/gpt/v1/files/new.txt?scope_id="+tid, a, "x"); !refused(r, "uploads") {
		t.Errorf("Files API put with uploads off: %d %s", r.status, r.body)
	}
	if r := f.download(a, tid, "/mnt/user-data/uploads/new.txt"); r.status != 404 {
		t.Errorf("a refused upload was written: %d", r.status)
	}
	set(map[string]any{"uploads": map[string]any{"enabled": true, "maxBytes": 4}})
	if r := f.upload(t, a, tid, "", "big.txt", "too large"); r.status != 413 {
		t.Errorf("upload over the org cap: %d %s", r.status, r.body)
	}

	// Code execution off: explicit requests are removed and the turn answers.
	set(map[string]any{"codeExecution": map[string]any{"enabled": false}, "uploads": map[string]any{"maxBytes": 104857600}})
	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{
		"content": "```bash\necho hi > $OUTPUT_DIR/x.txt\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 || strings.Contains(string(r.body), "server_tool_use") || !strings.Contains(string(r.body), "not enabled") {
		t.Fatalf("turn with code execution off: %d %s", r.status, r.body)
	}

	// Every change is in the audit log, newest first, with before and after.
	r = s.do("GET", appAPI+"/org/audit", a, nil)
	n := 0
	for _, e := range r.json(t)["data"].([]any) {
		ev := e.(map[string]any)
		if ev["action"] == "org.features.update" {
			if ev["before"] == nil || ev["after"] == nil {
				t.Errorf("audit event without before/after: %v", ev)
			}
			n++
		}
	}
	if n != patches {
		t.Fatalf("audit log has %d feature changes, want %d: %s", n, patches, r.body)
	}
	var last map[string]any
	json.Unmarshal(r.body, &last)
	first := last["data"].([]any)[0].(map[string]any)["after"].(map[string]any)
	if first["codeExecution"].(map[string]any)["enabled"] != false {
		t.Fatalf("newest audit event is not the last change: %v", first)
	}
}

// TestWorkspaceTurnOutlivesItsClient: a chat turn whose client leaves while
// a command runs goes on running in the server (a reload reattaches to it):
// the thread names it as its running turn and refuses a second turn with
// 409 while it runs; its owner's Stop ends it, and the thread takes its next
// turn at once, without waiting for the command.
func TestWorkspaceTurnOutlivesItsClient(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			tid := f.thread(t, f.admin, f.pid)
			body, _ := json.Marshal(map[string]any{"content": "```bash\nsleep 60\n```", "stream": stream, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
			req, _ := http.NewRequest("POST", s.base+appAPI+"/thread/"+tid+"/messages", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+f.admin)
			req.Header.Set("Content-Type", "application/json")
			ctx, cancel := context.WithCancel(context.Background())
			if !stream {
				time.AfterFunc(3*time.Second, cancel) // leave while the command runs
			}
			resp, err := http.DefaultClient.Do(req.WithContext(ctx))
			if stream {
				// Leave once the command has started.
				if err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 4096)
				var seen []byte
				for !bytes.Contains(seen, []byte(`"server_tool_use"`)) {
					n, rerr := resp.Body.Read(buf)
					seen = append(seen, buf[:n]...)
					if rerr != nil {
						t.Fatalf("stream ended before the command: %v %s", rerr, seen)
					}
				}
				time.Sleep(500 * time.Millisecond)
				cancel()
				resp.Body.Close()
			} else {
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					t.Fatalf("the turn answered %d before the client left: %s", resp.StatusCode, b)
				}
			}
			// The client has gone; the turn runs on.
			time.Sleep(time.Second)
			r := s.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, map[string]any{"content": "hello"})
			if r.status != 409 || !strings.Contains(string(r.body), "a turn is already running in this thread") {
				t.Fatalf("a second turn while the first runs: %d %s, want 409", r.status, r.body)
			}
			r = s.do("GET", appAPI+"/thread/"+tid+"/messages", f.admin, nil)
			var listed struct {
				RunningTurnID string `json:"running_turn_id"`
			}
			if err := json.Unmarshal(r.body, &listed); err != nil || r.status != 200 || listed.RunningTurnID == "" {
				t.Fatalf("the thread names no running turn after its client left: %d %s", r.status, r.body)
			}
			if r := s.do("POST", appAPI+"/thread/"+tid+"/turns/"+listed.RunningTurnID+"/stop", f.admin, nil); r.status >= 300 {
				t.Fatalf("stop: %d %s", r.status, r.body)
			}
			stopped := time.Now()
			for {
				r := s.do("POST", appAPI+"/thread/"+tid+"/messages", f.admin, map[string]any{"content": "hello"})
				if r.status == 200 {
					break
				}
				if r.status != 409 || time.Since(stopped) > 15*time.Second {
					t.Fatalf("next turn %v after the stop: %d %s", time.Since(stopped), r.status, r.body)
				}
				time.Sleep(250 * time.Millisecond)
			}
			cancel()
		})
	}
}
