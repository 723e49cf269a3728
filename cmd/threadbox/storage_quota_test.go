package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"threadbox/web"
)

// storageInUse returns the bytes the org's storage quota counts in use, as
// a refused upload into the thread's container reports them: the upload
// is one byte larger than the quota.
func storageInUse(t *testing.T, f wsFixture, tok, tid string, quota int) int64 {
	t.Helper()
	r := f.upload(t, tok, tid, "", "probe.bin", strings.Repeat("p", quota+1))
	refused(t, "the probe upload", r, 413, "invalid_request_error", `quota "storageBytesPerOrg" exceeded`)
	m := regexp.MustCompile(`(\d+) are in use`).FindStringSubmatch(r.json(t)["error"].(map[string]any)["message"].(string))
	if m == nil {
		t.Fatalf("the refusal names no bytes in use: %s", r.body)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// threadsOf returns the ids of the caller's threads in a project.
func threadsOf(t *testing.T, s *server, tok, pid string) []string {
	t.Helper()
	r := s.do("GET", appAPI+"/thread?limit=100&project_id="+pid, tok, nil)
	mustStatus(t, "list threads", r, 200)
	var ids []string
	for _, th := range r.json(t)["data"].([]any) {
		ids = append(ids, th.(map[string]any)["id"].(string))
	}
	return ids
}

// containerFolders counts the containers' folders on the server's disk.
func containerFolders(t *testing.T, s *server) int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(s.dataDir, "containers"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(es)
}

// TestForkWithinTheStorageQuota: a fork copies the thread's messages and
// files, so it counts toward storageBytesPerOrg: one that does not fit is
// a 413 naming the quota and makes nothing (no thread, no container, no
// file), one that fits copies everything, and the copies count for the
// next fork.
func TestForkWithinTheStorageQuota(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a := f.admin
		const size = 20000
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": size * 3 / 2}})
		mustStatus(t, "upload", f.upload(t, a, f.tid, "data/big.bin", "big.bin", strings.Repeat("b", size)), 200)
		folders := containerFolders(t, s)

		words := []string{`quota "storageBytesPerOrg" exceeded`, "more bytes do not fit"}
		refused(t, "a fork past the quota", s.do("POST", appAPI+"/thread/"+f.tid+"/fork", a, nil), 413, "invalid_request_error", words...)
		if got := threadsOf(t, s, a, f.pid); len(got) != 1 || got[0] != f.tid {
			t.Fatalf("threads after a refused fork: %v", got)
		}
		if n := containerFolders(t, s); n != folders {
			t.Fatalf("a refused fork left %d container folders, want %d", n, folders)
		}

		// Room for one copy: the fork has the file, and the two copies
		// leave no room for a third.
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": size * 5 / 2}})
		r := s.do("POST", appAPI+"/thread/"+f.tid+"/fork", a, nil)
		mustStatus(t, "a fork that fits", r, 201)
		fork := r.json(t)["id"].(string)
		if r := f.download(a, fork, "/mnt/user-data/uploads/data/big.bin"); r.status != 200 || len(r.body) != size {
			t.Fatalf("the fork's file: %d, %d bytes", r.status, len(r.body))
		}
		folders = containerFolders(t, s)
		for _, src := range []string{f.tid, fork} {
			refused(t, "a second fork", s.do("POST", appAPI+"/thread/"+src+"/fork", a, nil), 413, "invalid_request_error", words...)
		}
		if got := threadsOf(t, s, a, f.pid); len(got) != 2 {
			t.Fatalf("threads after the refused forks: %v", got)
		}
		if n := containerFolders(t, s); n != folders {
			t.Fatalf("the refused forks left %d container folders, want %d", n, folders)
		}
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": nil}})
		mustStatus(t, "unlimited again", s.do("POST", appAPI+"/thread/"+f.tid+"/fork", a, nil), 201)
	})
}

// turnLogBytes sums the bytes of a turn's stored event log, as its events
// route replays it: each numbered event's name and data.
func turnLogBytes(t *testing.T, s *server, tok, tid, turnID string) int64 {
	t.Helper()
	r := s.do("GET", appAPI+"/thread/"+tid+"/turns/"+turnID+"/events", tok, nil)
	mustStatus(t, "turn events", r, 200)
	var (
		n          int64
		events     int
		numbered   bool
		name, data string
	)
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "id: "):
			numbered = true
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "":
			if numbered {
				n += int64(len(name) + len(data))
				events++
			}
			numbered, name, data = false, "", ""
		}
	}
	if events == 0 {
		t.Fatalf("the turn's log replayed no events: %s", r.body)
	}
	return n
}

// TestStorageQuotaCountsMessagesAndTurnLogs: a thread's messages and its
// turns' event logs count toward storageBytesPerOrg, byte for byte, and a
// turn whose user message does not fit is a 413 naming the quota that
// stores nothing.
func TestStorageQuotaCountsMessagesAndTurnLogs(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a, tid := f.admin, f.tid
		const quota = 100000
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": quota}})
		r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": strings.Repeat("a", 3000)})
		mustStatus(t, "a turn", r, 200)
		turnID := r.header.Get(web.TurnIDHeader)

		// What the thread stores: its messages' content and usage (served
		// as null when none is stored) and the turn's log, whose last
		// record (how the turn ended, a few bytes) followers turn into the
		// stream's end instead of replaying it.
		var hist struct {
			Data []struct {
				Content json.RawMessage `json:"content"`
				Usage   json.RawMessage `json:"usage"`
			} `json:"data"`
		}
		r = s.do("GET", appAPI+"/thread/"+tid+"/messages", a, nil)
		mustStatus(t, "history", r, 200)
		if err := json.Unmarshal(r.body, &hist); err != nil || len(hist.Data) != 2 {
			t.Fatalf("history: %v %s", err, r.body)
		}
		var content, usage int64
		for _, m := range hist.Data {
			content += int64(len(m.Content))
			usage += int64(len(m.Usage))
		}
		logBytes := turnLogBytes(t, s, a, tid, turnID)
		used := storageInUse(t, f, a, tid, quota)
		const endRecord = 64
		if low, high := content+logBytes, content+logBytes+usage+endRecord; used < low || used > high {
			t.Fatalf("%d bytes in use, want between %d and %d (messages %d, usage %d, turn log %d)", used, low, high, content, usage, logBytes)
		}

		// A user message larger than what is left is refused before
		// anything is stored; one that fits runs.
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": used + 100}})
		refused(t, "a turn that does not fit", s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": strings.Repeat("b", 200)}),
			413, "invalid_request_error", `quota "storageBytesPerOrg" exceeded`, "more bytes do not fit")
		if h := f.history(t, a, tid); len(h) != 2 {
			t.Fatalf("a refused turn stored messages: %d", len(h))
		}
		mustStatus(t, "a turn that fits", s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "hi"}), 200)
		// Its answer and log took the org past the quota: nothing more runs.
		refused(t, "a turn with nothing left", s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "hi"}),
			413, "invalid_request_error", `quota "storageBytesPerOrg" exceeded`)
		if h := f.history(t, a, tid); len(h) != 4 {
			t.Fatalf("history after the refusals: %d messages", len(h))
		}
	})
}

// TestSkillUploadsWithinTheStorageQuota: a skill version's files count
// toward storageBytesPerOrg; an upload that does not fit is a 413 naming
// the quota that records no version, and deleting the skill makes room.
func TestSkillUploadsWithinTheStorageQuota(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s := startServer(t, db, nil)
		f := newWSFixture(t, s)
		a := f.admin
		const quota, size = 5000, 3000
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": quota}})
		manifest := wsManifest("report", "Writes reports")
		arch := wsZip(t, wsEntry{name: "SKILL.md", body: manifest}, wsEntry{name: "data.txt", body: strings.Repeat("d", size)})
		upload := func() response {
			return s.do("POST", appAPI+"/skills", a, arch, "Content-Type", "application/zip")
		}
		r := upload()
		mustStatus(t, "a skill that fits", r, 201)
		skillID := r.json(t)["id"].(string)
		if used := storageInUse(t, f, a, f.tid, quota); used != int64(size+len(manifest)) {
			t.Fatalf("%d bytes in use, want the skill's files' %d", used, size+len(manifest))
		}
		refused(t, "a second version", upload(), 413, "invalid_request_error", `quota "storageBytesPerOrg" exceeded`, "more bytes do not fit")
		if got := s.do("GET", appAPI+"/skills", a, nil).json(t)["data"].([]any); len(got) != 1 {
			t.Fatalf("skills after the refusal: %v", got)
		}
		mustStatus(t, "delete the skill", s.do("DELETE", appAPI+"/skills/"+skillID, a, nil), 200)
		mustStatus(t, "after the delete", upload(), 201)
	})
}

// TestCodeWritesCountTowardTheStorageQuota: files code writes in the
// sandbox count toward storageBytesPerOrg as uploads do. Once they take
// the org past the quota, every request that would store more — a chat
// turn, a Messages API request that runs code (and its validation), a
// fork, an upload — is a 413 naming the quota, and nothing of it is made;
// a Messages API request that runs no code stores nothing and is served.
// Deleting the file makes room at once.
func TestCodeWritesCountTowardTheStorageQuota(t *testing.T) {
	bin := needDocker(t)
	s := startServer(t, "", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	f := newWSFixture(t, s)
	a, tid := f.admin, f.tid
	const quota, written = 1 << 20, 1500000
	f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": quota}})
	turn := func(code string) response {
		return s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{
			"content": "```bash\n" + code + "\n```", "pgpt": map[string]any{"tools": []any{"code_execution"}},
		})
	}
	r := turn("head -c " + strconv.Itoa(written) + " /dev/zero > big.bin && echo wrote")
	if r.status != 200 || !strings.Contains(string(r.body), `wrote\n`) {
		t.Fatalf("the writing turn: %d %s", r.status, r.body)
	}
	if used := storageInUse(t, f, a, tid, quota); used < written {
		t.Fatalf("%d bytes in use after code wrote %d", used, written)
	}

	full := `quota "storageBytesPerOrg" exceeded`
	refused(t, "a turn that runs code", turn("echo again"), 413, "invalid_request_error", full)
	refused(t, "a turn without code", s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "hi"}), 413, "invalid_request_error", full)
	if h := f.history(t, a, tid); len(h) != 2 {
		t.Fatalf("the refused turns stored messages: %d", len(h))
	}
	request := map[string]any{
		"model": "default", "max_tokens": 100, "container": "box",
		"tools":    []any{map[string]any{"type": "code_execution_20250825", "name": "code_execution"}},
		"messages": []any{map[string]any{"role": "user", "content": "```bash\necho box\n```"}},
	}
	refused(t, "a Messages API request that runs code", s.do("POST", "/api/gpt/v1/messages", a, request), 413, "invalid_request_error", full)
	refused(t, "its validation", s.do("POST", "/api/gpt/v1/messages/validate", a, request), 413, "invalid_request_error", full)
	noFolder(t, s, a, "box")
	plain := map[string]any{"model": "default", "max_tokens": 100, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	mustStatus(t, "a Messages API request without code", s.do("POST", "/api/gpt/v1/messages", a, plain), 200)
	folders := containerFolders(t, s)
	refused(t, "a fork", s.do("POST", appAPI+"/thread/"+tid+"/fork", a, nil), 413, "invalid_request_error", full)
	if got := threadsOf(t, s, a, f.pid); len(got) != 1 || containerFolders(t, s) != folders {
		t.Fatalf("the refused fork made something: threads %v, %d container folders, want %d", got, containerFolders(t, s), folders)
	}

	mustStatus(t, "delete the file", s.do("DELETE", filesAPI+"/"+fileID("/home/agent/workspace/big.bin")+"?scope_id="+tid, a, nil), 200)
	if r := turn("echo again"); r.status != 200 || !strings.Contains(string(r.body), `again\n`) {
		t.Fatalf("a turn after the delete: %d %s", r.status, r.body)
	}
}
