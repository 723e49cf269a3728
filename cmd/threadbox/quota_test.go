package main

import (
	"errors"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"threadbox/infra/sandbox/docker"
)

// quotasOf returns the "quotas" member of the policy.
func quotasOf(t *testing.T, s *server, tok string) map[string]any {
	t.Helper()
	r := s.do("GET", appAPI+"/org/features", tok, nil)
	mustStatus(t, "get features", r, 200)
	q, _ := r.json(t)["quotas"].(map[string]any)
	if q == nil {
		t.Fatalf("no quotas in the policy: %s", r.body)
	}
	return q
}

// refused checks an error envelope: status, type and words of its message.
func refused(t *testing.T, what string, r response, status int, typ string, words ...string) {
	t.Helper()
	if r.status != status || r.errorType(t) != typ {
		t.Fatalf("%s: %d %s, want %d %s", what, r.status, r.body, status, typ)
	}
	msg := r.json(t)["error"].(map[string]any)["message"].(string)
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Fatalf("%s: message %q lacks %q", what, msg, w)
		}
	}
}

// noFolder checks that no host folder was made for a scope.
func noFolder(t *testing.T, s *server, tok, scope string) {
	t.Helper()
	if _, err := os.Stat(s.hostDirs(tok, scope).Root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("scope %s has a host folder: %v", scope, err)
	}
}

// TestQuotasInThePolicy: the quotas are part of the policy on the wire,
// merged by PATCH (null restores the default, unlimited), validated (400,
// nothing applied) and audited like the feature switches.
func TestQuotasInThePolicy(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a := f.admin
		quotas := func(rsu, rso, cpu, sbo float64) map[string]any {
			return map[string]any{"runningSandboxesPerUser": rsu, "runningSandboxesPerOrg": rso, "containersPerUser": cpu, "storageBytesPerOrg": sbo, "snapshotsPerThread": 0.0, "snapshotBytesPerThread": 0.0}
		}
		if got := quotasOf(t, s, a); mustJSON(got) != mustJSON(quotas(0, 0, 0, 0)) {
			t.Fatalf("default quotas: %v", got)
		}
		steps := []struct {
			name   string
			patch  string
			status int
			words  string // in the error message
			want   map[string]any
		}{
			{"set two", `{"quotas":{"runningSandboxesPerUser":1,"storageBytesPerOrg":5000000000}}`, 200, "", quotas(1, 0, 0, 5e9)},
			{"merge one", `{"quotas":{"containersPerUser":3,"runningSandboxesPerOrg":10}}`, 200, "", quotas(1, 10, 3, 5e9)},
			{"null restores one", `{"quotas":{"runningSandboxesPerOrg":null}}`, 200, "", quotas(1, 0, 3, 5e9)},
			{"other members leave them", `{"downloads":{"uploaded":false}}`, 200, "", quotas(1, 0, 3, 5e9)},
			{"negative refused", `{"quotas":{"containersPerUser":-1}}`, 400, "quotas.containersPerUser must be 0 (unlimited) or a positive number", quotas(1, 0, 3, 5e9)},
			{"negative refused with other changes", `{"codeExecution":{"enabled":false},"quotas":{"runningSandboxesPerUser":5,"storageBytesPerOrg":-5}}`, 400, "quotas.storageBytesPerOrg", quotas(1, 0, 3, 5e9)},
			{"fraction refused", `{"quotas":{"containersPerUser":1.5}}`, 400, "", quotas(1, 0, 3, 5e9)},
			{"string refused", `{"quotas":{"containersPerUser":"2"}}`, 400, "", quotas(1, 0, 3, 5e9)},
			{"not an object refused", `{"quotas":7}`, 400, "", quotas(1, 0, 3, 5e9)},
			{"unknown quota refused", `{"quotas":{"gpusPerUser":1}}`, 400, `unknown quota "gpusPerUser"`, quotas(1, 0, 3, 5e9)},
			{"null restores all", `{"quotas":null}`, 200, "", quotas(0, 0, 0, 0)},
		}
		for _, st := range steps {
			r := s.do("PATCH", appAPI+"/org/features", a, st.patch)
			if st.status != 200 {
				refused(t, st.name, r, st.status, "invalid_request_error", st.words)
			} else if r.status != 200 || mustJSON(r.json(t)["quotas"]) != mustJSON(st.want) {
				t.Fatalf("%s: %d %s", st.name, r.status, r.body)
			}
			if got := quotasOf(t, s, a); mustJSON(got) != mustJSON(st.want) {
				t.Fatalf("%s: quotas %v, want %v", st.name, got, st.want)
			}
		}
		if r := s.do("GET", appAPI+"/org/features", a, nil); r.json(t)["codeExecution"].(map[string]any)["enabled"] != true {
			t.Fatalf("a refused patch applied a part: %s", r.body)
		}
		// Only admins set quotas; members read them.
		refused(t, "member patch", s.do("PATCH", appAPI+"/org/features", f.member, `{"quotas":{"containersPerUser":1}}`), 403, "permission_error")
		quotasOf(t, s, f.member)
		// Every accepted change is audited with the quotas before and after.
		var feat []map[string]any
		for _, e := range s.do("GET", appAPI+"/org/audit", a, nil).json(t)["data"].([]any) {
			if e := e.(map[string]any); e["action"] == "org.features.update" {
				feat = append(feat, e)
			}
		}
		if len(feat) != 5 {
			t.Fatalf("%d audit entries, want 5: %v", len(feat), feat)
		}
		first := feat[len(feat)-1] // newest first
		if mustJSON(first["before"].(map[string]any)["quotas"]) != mustJSON(quotas(0, 0, 0, 0)) || mustJSON(first["after"].(map[string]any)["quotas"]) != mustJSON(quotas(1, 0, 0, 5e9)) {
			t.Fatalf("audit of the first change: %v", first)
		}
	})
}

// TestContainersPerUserQuota: past containersPerUser a new container (a
// Files API scope, a thread's first use, a Messages API container) is a
// 403 naming the quota, and nothing of it is left; the user's existing
// containers and other users are not affected.
func TestContainersPerUserQuota(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a := f.admin
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"containersPerUser": 2}})
		mustStatus(t, "first container", s.upload(a, "box-a", "", "a.txt", "a"), 200)
		mustStatus(t, "the thread's container", f.upload(t, a, f.tid, "", "t.txt", "t"), 200)

		words := []string{`quota "containersPerUser" reached`, "allows 2 containers per user and you have 2"}
		refused(t, "third container", s.upload(a, "box-b", "", "b.txt", "b"), 403, "permission_error", words...)
		mustStatus(t, "the refused container", s.do("GET", filesAPI+"?scope_id=box-b", a, nil), 404)
		noFolder(t, s, a, "box-b")
		tid2 := f.thread(t, a, f.pid)
		refused(t, "a new thread's container", f.upload(t, a, tid2, "", "t.txt", "t"), 403, "permission_error", words...)
		noFolder(t, s, a, tid2)
		msg := map[string]any{"model": "default", "max_tokens": 100, "container": "box-c", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
		refused(t, "a Messages API container", s.do("POST", "/api/gpt/v1/messages", a, msg), 403, "permission_error", words...)
		noFolder(t, s, a, "box-c")

		mustStatus(t, "an existing container", s.upload(a, "box-a", "", "a2.txt", "a"), 200)
		mustStatus(t, "another user", s.upload(f.member, "box-b", "", "b.txt", "b"), 200)
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"containersPerUser": 0}})
		mustStatus(t, "unlimited again", s.upload(a, "box-b", "", "b.txt", "b"), 200)
	})
}

// TestStorageQuota: uploads count against storageBytesPerOrg with what the
// org's containers hold; one that does not fit is a 413 naming the quota,
// stores nothing and, when nothing fits, makes no container.
func TestStorageQuota(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a := f.admin
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": 1000}})
		mustStatus(t, "600 bytes", s.put(a, "box", "one.bin", strings.Repeat("1", 600)), 200)
		refused(t, "600 more", s.upload(a, "box", "", "two.bin", strings.Repeat("2", 600)), 413, "invalid_request_error",
			`quota "storageBytesPerOrg" exceeded`, "may store 1000 bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), 600 are in use", "larger than the 400 bytes left")
		mustStatus(t, "two.bin not stored", s.do("GET", filesAPI+"/"+fileID("/mnt/user-data/uploads/two.bin")+"?scope_id=box", a, nil), 404)
		mustStatus(t, "exactly full", s.put(a, "box", "three.bin", strings.Repeat("3", 400)), 200)

		full := []string{`quota "storageBytesPerOrg" exceeded`, "1000 are in use and nothing more fits"}
		refused(t, "a new scope when full", s.upload(a, "new-box", "", "x.txt", "x"), 413, "invalid_request_error", full...)
		mustStatus(t, "no container made", s.do("GET", filesAPI+"?scope_id=new-box", a, nil), 404)
		noFolder(t, s, a, "new-box")
		refused(t, "a thread upload when full", f.upload(t, a, f.tid, "", "t.txt", "t"), 413, "invalid_request_error", full...)
		noFolder(t, s, a, f.tid)
		refused(t, "another user of the org", s.put(f.member, "m", "m.txt", "m"), 413, "invalid_request_error", full...)
		mustStatus(t, "another org", s.put(f.out, "box", "o.txt", "o"), 200)

		// Deleting frees room at once.
		mustStatus(t, "delete", s.do("DELETE", filesAPI+"/"+fileID("/mnt/user-data/uploads/one.bin")+"?scope_id=box", a, nil), 200)
		mustStatus(t, "after the delete", f.upload(t, a, f.tid, "", "t.txt", strings.Repeat("t", 600)), 200)
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": nil}})
		mustStatus(t, "unlimited again", s.put(a, "box", "big.bin", strings.Repeat("b", 5000)), 200)
	})
}

// sandboxesOf lists the container ids of a test server's Docker sandboxes.
func sandboxesOf(t *testing.T, s *server) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label="+docker.LabelInstance+"="+s.env["THREADBOX_INSTANCE"],
		"--format", `{{.Label "`+docker.LabelContainer+`"}}`).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	ids := strings.Fields(string(out))
	sort.Strings(ids)
	return ids
}

// TestRunningSandboxesQuota: with runningSandboxesPerUser 1, a user's
// second running sandbox (a Messages API container, or a thread's turn) is
// a 429 naming the quota, before any container record, folder or sandbox
// is made; the running one keeps serving, another user is not bound by
// it, and runningSandboxesPerOrg bounds the org.
func TestRunningSandboxesQuota(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	a := f.admin
	me := s.do("GET", appAPI+"/me", a, nil).json(t)["user_id"].(string)
	run := func(tok, container, word string) response {
		t.Helper()
		return s.do("POST", "/api/gpt/v1/messages", tok, map[string]any{
			"model": "default", "max_tokens": 100, "container": container,
			"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
			"messages": []any{map[string]any{"role": "user", "content": "```bash\necho " + word + "\n```"}},
		})
	}
	ran := func(what string, r response, word string) {
		t.Helper()
		if r.status != 200 || !strings.Contains(string(r.body), `"stdout":"`+word+`\n"`) {
			t.Fatalf("%s: %d %s", what, r.status, r.body)
		}
	}
	f.patchFeatures(t, map[string]any{"quotas": map[string]any{"runningSandboxesPerUser": 1}})
	ran("first sandbox", run(a, "box-a", "one"), "one")
	if got := sandboxesOf(t, s); len(got) != 1 || got[0] != me+"--box-a" {
		t.Fatalf("sandboxes %v", got)
	}

	perUser := []string{`quota "runningSandboxesPerUser" reached`, "allows 1 running sandbox per user and you have 1 running"}
	refused(t, "second sandbox", run(a, "box-b", "two"), 429, "rate_limit_error", perUser...)
	validate := s.do("POST", "/api/gpt/v1/messages/validate", a, map[string]any{
		"model": "default", "max_tokens": 100, "container": "box-b",
		"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
		"messages": []any{map[string]any{"role": "user", "content": "hi"}},
	})
	refused(t, "validation of a request past the quota", validate, 429, "rate_limit_error", perUser...)
	mustStatus(t, "no record of the refused container", s.do("GET", filesAPI+"?scope_id=box-b", a, nil), 404)
	noFolder(t, s, a, "box-b")
	body := map[string]any{"content": "```bash\necho three\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}}}
	refused(t, "a thread's sandbox", s.do("POST", appAPI+"/thread/"+f.tid+"/messages", a, body), 429, "rate_limit_error", perUser...)
	if h := f.history(t, a, f.tid); len(h) != 0 {
		t.Fatalf("a refused turn stored %d messages", len(h))
	}
	noFolder(t, s, a, f.tid)
	if got := sandboxesOf(t, s); len(got) != 1 {
		t.Fatalf("sandboxes after the refusals %v", got)
	}
	ran("the running sandbox still serves", run(a, "box-a", "again"), "again")

	// Another user has their own per-user quota; the org's bounds both.
	ran("another user", run(f.member, "box-m", "member"), "member")
	f.patchFeatures(t, map[string]any{"quotas": map[string]any{"runningSandboxesPerUser": 0, "runningSandboxesPerOrg": 2}})
	refused(t, "past the org's quota", run(a, "box-b", "two"), 429, "rate_limit_error",
		`quota "runningSandboxesPerOrg" reached`, "allows 2 running sandboxes and 2 are running")
	noFolder(t, s, a, "box-b")

	f.patchFeatures(t, map[string]any{"quotas": nil})
	ran("unlimited again", run(a, "box-b", "two"), "two")
	if got := sandboxesOf(t, s); len(got) != 3 {
		t.Fatalf("sandboxes %v", got)
	}
}
