package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSandboxTokenScope: the token handed to code in a sandbox acts only on
// that sandbox's container. Code running in one
// container of a user can neither read, write nor delete the files of the
// user's other containers and threads, nor run code in them; its own
// container stays open to it, and a request naming no container uses it.
func TestSandboxTokenScope(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	if r := s.put(f.admin, "victim", "secret.txt", "victim's secret"); r.status != 200 && r.status != 201 {
		t.Fatalf("put into victim: %d %s", r.status, r.body)
	}
	if r := f.upload(t, f.admin, f.tid, "", "thread-secret.txt", "thread's secret"); r.status != 200 && r.status != 201 {
		t.Fatalf("upload into thread: %d %s", r.status, r.body)
	}
	secretID := base64.RawURLEncoding.EncodeToString([]byte("/mnt/user-data/uploads/secret.txt"))
	threadSecretID := base64.RawURLEncoding.EncodeToString([]byte("/mnt/user-data/uploads/thread-secret.txt"))

	// Each line of the script is one request from inside the sandbox of
	// container "attacker", answered by its status.
	const codeTool = `"tools":[{"type":"code_execution_20250825","name":"code_execution"}]`
	msg := func(container string) string {
		c := ""
		if container != "" {
			c = `"container":"` + container + `",`
		}
		return `'{"model":"m","max_tokens":5,` + c + codeTool + `,"messages":[{"role":"user","content":"hi"}]}'`
	}
	cases := []struct {
		name, args, want string
	}{
		{"list another container's files", `"$B/files?scope_id=victim"`, "403"},
		{"read another container's file", `"$B/files/` + secretID + `/content?scope_id=victim"`, "403"},
		{"delete another container's file", `-X DELETE "$B/files/` + secretID + `?scope_id=victim"`, "403"},
		{"delete by prefix in another container", `-X DELETE "$B/files?scope_id=victim&prefix=s"`, "403"},
		{"read a thread's file", `"$B/files/` + threadSecretID + `/content?scope_id=` + f.tid + `"`, "403"},
		{"write into a thread", `-X PUT --data-binary evil "$B/files/evil.txt?scope_id=` + f.tid + `"`, "403"},
		{"run code in another container", `-H 'content-type: application/json' -d ` + msg("victim") + ` "$B/messages"`, "403"},
		{"run code in a thread", `-H 'content-type: application/json' -d ` + msg(f.tid) + ` "$B/messages"`, "403"},
		{"validate another container", `-H 'content-type: application/json' -d ` + msg("victim") + ` "$B/messages/validate"`, "403"},
		{"the default container is another", `-H 'content-type: application/json' -d ` + msg("default") + ` "$B/messages"`, "403"},
		{"the backends matrix", `"$B/sandbox/backends"`, "403"},
		{"list its own files", `"$B/files?scope_id=attacker"`, "200"},
		{"write its own files", `-X PUT --data-binary mine "$B/files/mine.txt?scope_id=attacker"`, "200"},
		{"a request naming no container uses its own", `-H 'content-type: application/json' -d ` + msg("") + ` "$B/messages"`, "200"},
	}
	var script strings.Builder
	script.WriteString("```bash\nB=$ANTHROPIC_BASE_URL/v1\n")
	for _, c := range cases {
		script.WriteString(`curl -sS -m 30 -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" ` + c.args + "\n")
	}
	script.WriteString("```\n")

	cl := msgClient(s, f.admin)
	res, err := cl.Messages.New(context.Background(), msgParams("attacker", userText(script.String()), codeExecTool...))
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for first < len(res.Content) && res.Content[first].Type != "server_tool_use" {
		first++
	}
	_, out := bashResult(t, res.Content, first)
	got := strings.Split(strings.TrimSuffix(out.Stdout, "\n"), "\n")
	if len(got) != len(cases) {
		t.Fatalf("%d answers for %d requests: %q (stderr %q)", len(got), len(cases), out.Stdout, out.Stderr)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%s: %s, want %s", c.name, got[i], c.want)
		}
	}

	// The other containers are untouched.
	if r := s.do("GET", filesAPI+"/"+secretID+"/content?scope_id=victim", f.admin, nil); r.status != 200 || string(r.body) != "victim's secret" {
		t.Errorf("victim's file after the attack: %d %q", r.status, r.body)
	}
	if r := s.do("GET", filesAPI+"?scope_id="+f.tid, f.admin, nil); r.status != 200 || strings.Contains(string(r.body), "evil.txt") || !strings.Contains(string(r.body), "thread-secret.txt") {
		t.Errorf("thread's files after the attack: %d %s", r.status, r.body)
	}
}

// errorMessage returns error.message of an error envelope.
func errorMessage(t *testing.T, r response) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

// featureChanges counts the org.features.update events of the audit log.
func featureChanges(t *testing.T, s *server, tok string) int {
	t.Helper()
	r := s.do("GET", appAPI+"/org/audit", tok, nil)
	if r.status != 200 {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	n := 0
	for _, e := range r.json(t)["data"].([]any) {
		if e.(map[string]any)["action"] == "org.features.update" {
			n++
		}
	}
	return n
}

// TestPolicyPatchUnknownKeys: a policy patch with a key the policy does not
// have, or a value of the wrong type, is a 400 naming the key; nothing is
// changed or audited.
func TestPolicyPatchUnknownKeys(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		a := s.bootstrap("acme", "admin@acme.test")
		before := s.do("GET", appAPI+"/org/features", a, nil)
		cases := []struct {
			name, body, names string
		}{
			{"a mistyped member", `{"codeExecution":{"enable":false}}`, `"codeExecution.enable"`},
			{"a mistyped section", `{"codeExecutions":{"enabled":false}}`, `"codeExecutions"`},
			{"a known and an unknown member", `{"uploads":{"enabled":false,"maxbytes":5}}`, `"uploads.maxbytes"`},
			{"an unknown quota", `{"quotas":{"gpus":1}}`, `"gpus"`},
			{"a value of the wrong type", `{"downloads":{"generated":"no"}}`, "generated"},
			{"a section that is no object", `{"codeExecution":false}`, "codeExecution"},
			{"not an object", `[]`, "JSON object"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := s.do("PATCH", appAPI+"/org/features", a, tc.body)
				if r.status != 400 || r.errorType(t) != "invalid_request_error" || !strings.Contains(errorMessage(t, r), tc.names) {
					t.Fatalf("%s: %d %s, want 400 naming %s", tc.body, r.status, r.body, tc.names)
				}
			})
		}
		if after := s.do("GET", appAPI+"/org/features", a, nil); string(after.body) != string(before.body) {
			t.Errorf("refused patches changed the policy: %s, was %s", after.body, before.body)
		}
		if n := featureChanges(t, s, a); n != 0 {
			t.Errorf("refused patches wrote %d audit events", n)
		}
		// A correct patch still applies and is audited.
		r := s.do("PATCH", appAPI+"/org/features", a, `{"codeExecution":{"enabled":false},"codeExecution":null,"quotas":{"containersPerUser":3}}`)
		if r.status != 200 || !strings.Contains(string(r.body), `"containersPerUser":3`) {
			t.Fatalf("a correct patch: %d %s", r.status, r.body)
		}
		if n := featureChanges(t, s, a); n != 1 {
			t.Errorf("a correct patch wrote %d audit events, want 1", n)
		}
	})
}

// auditEvents returns the audit log's events of one action, newest first.
func auditEvents(t *testing.T, s *server, tok, action string) []map[string]any {
	t.Helper()
	r := s.do("GET", appAPI+"/org/audit", tok, nil)
	if r.status != 200 {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	var out []map[string]any
	for _, e := range r.json(t)["data"].([]any) {
		if ev := e.(map[string]any); ev["action"] == action {
			out = append(out, ev)
		}
	}
	return out
}

// TestProjectManagement: a project is managed (renamed, deleted) by its
// owner or an admin; renames and deletions are audited; a member who owns
// a project may delete it with every thread in it, but not another
// member's single thread.
func TestProjectManagement(t *testing.T) {
	databases(t, func(t *testing.T, dbURL string) {
		s := startServer(t, dbURL, nil)
		f := newWSFixture(t, s)
		if r := s.do("POST", appAPI+"/org/users", f.admin, map[string]any{"email": "m2@acme.test", "role": "member", "password": "member-password"}); r.status != 201 && r.status != 200 {
			t.Fatalf("create member: %d %s", r.status, r.body)
		}
		owner, other := f.member, login(t, s, "m2@acme.test", "member-password")
		mkProject := func(tok, name string) string {
			r := s.do("POST", appAPI+"/project", tok, map[string]any{"name": name})
			if r.status != 201 {
				t.Fatalf("project: %d %s", r.status, r.body)
			}
			return r.json(t)["id"].(string)
		}
		pid, otherPid := mkProject(owner, "Owned"), mkProject(other, "Other's")
		ownerThread, otherThread := f.thread(t, owner, pid), f.thread(t, other, pid)

		steps := []struct {
			name, method, path, tok string
			body                    any
			want                    int
		}{
			{"another member renames the project", "PATCH", "/project/" + pid, other, map[string]any{"name": "Hijacked"}, 403},
			{"another member deletes the project", "DELETE", "/project/" + pid, other, nil, 403},
			{"the owner renames it", "PATCH", "/project/" + pid, owner, map[string]any{"name": "Renamed"}, 200},
			{"an admin renames a member's project", "PATCH", "/project/" + otherPid, f.admin, map[string]any{"name": "Admin's name"}, 200},
			{"the project's owner deletes another member's thread", "DELETE", "/thread/" + otherThread, owner, nil, 404},
			{"the thread's owner still has it", "GET", "/thread/" + otherThread, other, nil, 200},
			{"the owner deletes their own thread", "DELETE", "/thread/" + ownerThread, owner, nil, 204},
		}
		for _, st := range steps {
			if r := s.do(st.method, appAPI+st.path, st.tok, st.body); r.status != st.want {
				t.Fatalf("%s: %d %s, want %d", st.name, r.status, r.body, st.want)
			}
		}
		if r := s.do("GET", appAPI+"/project/"+pid, other, nil); r.status != 200 || r.json(t)["name"] != "Renamed" {
			t.Fatalf("project after the refused rename: %d %s", r.status, r.body)
		}
		renames := auditEvents(t, s, f.admin, "project.rename")
		if len(renames) != 2 {
			t.Fatalf("%d rename events, want 2: %v", len(renames), renames)
		}
		first := renames[1] // newest first
		if first["target"] != pid || first["before"].(map[string]any)["name"] != "Owned" || first["after"].(map[string]any)["name"] != "Renamed" || first["actor_id"] == "" {
			t.Errorf("owner's rename event: %v", first)
		}

		// The owner's decision: the project goes with every thread in it.
		if r := s.do("DELETE", appAPI+"/project/"+pid, owner, nil); r.status != 204 {
			t.Fatalf("owner deletes the project: %d %s", r.status, r.body)
		}
		if r := s.do("GET", appAPI+"/thread/"+otherThread, other, nil); r.status != 404 {
			t.Errorf("a thread of the deleted project: %d %s", r.status, r.body)
		}
		if dels := auditEvents(t, s, f.admin, "project.delete"); len(dels) != 1 || dels[0]["target"] != pid {
			t.Errorf("delete events: %v", dels)
		}
	})
}

// TestArtifactsShowTheirMaker: artifacts belong to the project (docs/api.md,
// Concepts), so a member's private thread's outputs are listed and downloadable
// by every member of the project — and each says which thread and which
// user made it, also after the thread is gone.
func TestArtifactsShowTheirMaker(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	memberID := s.do("GET", appAPI+"/me", f.member, nil).json(t)["user_id"].(string)
	if r := s.do("POST", appAPI+"/org/users", f.admin, map[string]any{"email": "m2@acme.test", "role": "member", "password": "member-password"}); r.status != 201 && r.status != 200 {
		t.Fatalf("create member: %d %s", r.status, r.body)
	}
	other := login(t, s, "m2@acme.test", "member-password") // neither the thread's nor the project's owner
	tid := f.thread(t, f.member, f.pid)
	r := s.do("POST", appAPI+"/thread/"+tid+"/messages", f.member, map[string]any{
		"content": "```bash\necho made by a member > /mnt/user-data/outputs/report.txt\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}},
	})
	if r.status != 200 {
		t.Fatalf("member's turn: %d %s", r.status, r.body)
	}
	check := func(t *testing.T) {
		t.Helper()
		r := s.do("GET", appAPI+"/project/"+f.pid+"/artifacts", other, nil)
		if r.status != 200 {
			t.Fatalf("artifacts: %d %s", r.status, r.body)
		}
		data := r.json(t)["data"].([]any)
		if len(data) != 1 {
			t.Fatalf("artifacts: %s", r.body)
		}
		a := data[0].(map[string]any)
		by, _ := a["created_by"].(map[string]any)
		if a["thread_id"] != tid || by["user_id"] != memberID || by["email"] != "m@acme.test" {
			t.Fatalf("artifact's maker: thread %v, created_by %v", a["thread_id"], a["created_by"])
		}
		one := s.do("GET", appAPI+"/artifact/"+a["id"].(string), other, nil)
		if one.status != 200 || !strings.Contains(string(one.body), `"created_by":{"user_id":"`+memberID+`","email":"m@acme.test"}`) {
			t.Fatalf("one artifact: %d %s", one.status, one.body)
		}
		if dl := s.do("GET", a["download_url"].(string), other, nil); dl.status != 200 || string(dl.body) != "made by a member\n" {
			t.Fatalf("download by another member of the project: %d %s", dl.status, dl.body)
		}
	}
	t.Run("listed with its thread and maker", check)
	if r := s.do("DELETE", appAPI+"/thread/"+tid, f.member, nil); r.status != 204 {
		t.Fatalf("delete thread: %d %s", r.status, r.body)
	}
	t.Run("after its thread is deleted", check)
}

// TestSandboxErrorsHideHostDetails: when a sandbox cannot start, the tool
// result shows a stable message and an error id, never the backend's error
// with its host paths; the server's log has the cause under that id.
func TestSandboxErrorsHideHostDetails(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	a := s.bootstrap("acme", "admin@acme.test")
	if r := s.put(a, "broken", "x.txt", "x"); r.status != 200 && r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	// The container's workspace folder becomes a file: Docker cannot mount
	// it, and says so with the host path.
	roots, _ := filepath.Glob(filepath.Join(s.dataDir, "containers", "*broken*"))
	if len(roots) != 1 {
		t.Fatalf("container folders: %v", roots)
	}
	ws := filepath.Join(roots[0], "workspace")
	if err := os.RemoveAll(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	// code_execution_v1: its error blocks carry detail.explanation.
	r := s.do("POST", "/api/gpt/v1/messages", a, map[string]any{
		"model": "default", "max_tokens": 100, "container": "broken",
		"tools":    []any{map[string]any{"name": "code_execution", "type": "code_execution_v1"}},
		"messages": []any{map[string]any{"role": "user", "content": "```bash\necho hi\n```"}},
	})
	expl := string(r.body)
	if r.status != 200 || !strings.Contains(expl, "bash_code_execution_tool_result_error") {
		t.Fatalf("turn: %d %s", r.status, expl)
	}
	eid := regexp.MustCompile(`err_[0-9a-z]+`).FindString(expl)
	for _, leak := range []string{s.dataDir, "/containers/", "docker", "daemon", "mount"} {
		if strings.Contains(strings.ToLower(expl), strings.ToLower(leak)) {
			t.Errorf("the tool result shows %q: %s", leak, expl)
		}
	}
	if eid == "" || !strings.Contains(expl, "unavailable") {
		t.Fatalf("the tool result has no error id: %s", expl)
	}
	if logs := s.stderr.String(); !strings.Contains(logs, eid) || !strings.Contains(logs, roots[0]) {
		t.Errorf("the log lacks the error id %s with the cause: %s", eid, logs)
	}
}
