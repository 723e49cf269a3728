package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// threadFiles returns the files of a thread's container on the host, by
// folder and path ("workspace/a.txt") with their content.
func threadFiles(t *testing.T, s *server, tid string) map[string]string {
	t.Helper()
	root := filepath.Join(s.dataDir, "containers", tid)
	out := map[string]string{}
	for _, dir := range []string{"workspace", "uploads", "outputs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if !e.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if os.IsNotExist(err) {
				return nil // removed since the listing: a revert or rewind at work
			}
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = string(b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// lastAnswer returns the id of a thread's last assistant message.
func lastAnswer(t *testing.T, f wsFixture, tok, tid string) string {
	t.Helper()
	h := f.history(t, tok, tid)
	m := h[len(h)-1].(map[string]any)
	if m["role"] != "assistant" || m["complete"] != true {
		t.Fatalf("last message is not a complete answer: %v", m)
	}
	return m["id"].(string)
}

// liveIDs returns the ids of a thread's messages that are not earlier
// versions.
func liveIDs(t *testing.T, f wsFixture, tok, tid string) []string {
	t.Helper()
	var out []string
	for _, x := range f.history(t, tok, tid) {
		if m := x.(map[string]any); m["replaced"] != true {
			out = append(out, m["id"].(string))
		}
	}
	return out
}

// TestRewindAndForkAtATurn: a thread whose turns write, overwrite and
// delete files in its workspace and outputs is rewound to each turn in
// turn and holds exactly that turn's files, with the later history folded
// as an earlier version; a fork at the second turn has its history up to
// there and its files as they were then, and diverges from its parent
// without either seeing the other's later files. A rewind is refused
// while a turn of the thread runs, and audited.
func TestRewindAndForkAtATurn(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, db string) {
		s, fake := modelServer(t, db, "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
		f := newWSFixture(t, s)
		a, tid := f.admin, f.tid
		const ws, out = "/home/agent/workspace", "/mnt/user-data/outputs"
		turns := []struct {
			cmd  string
			want map[string]string
		}{
			{fmt.Sprintf("echo one > %[1]s/a.txt; mkdir -p %[1]s/d; echo keep > %[1]s/d/k.txt; echo r1 > %[2]s/r.txt", ws, out),
				map[string]string{"workspace/a.txt": "one\n", "workspace/d/k.txt": "keep\n", "outputs/r.txt": "r1\n"}},
			{fmt.Sprintf("echo two > %[1]s/a.txt; echo b > %[1]s/b.txt; rm %[2]s/r.txt", ws, out),
				map[string]string{"workspace/a.txt": "two\n", "workspace/b.txt": "b\n", "workspace/d/k.txt": "keep\n"}},
			{fmt.Sprintf("rm %[1]s/a.txt; rm -r %[1]s/d; echo three > %[1]s/b.txt; echo r3 > %[2]s/r.txt", ws, out),
				map[string]string{"workspace/b.txt": "three\n", "outputs/r.txt": "r3\n"}},
		}
		turn := func(tid, cmd, text string) string {
			t.Helper()
			fake.Push(bashStep(cmd), textStep("done"))
			r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": text, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
			mustStatus(t, text, r, 200)
			return lastAnswer(t, f, a, tid)
		}
		var answers []string
		for i, tc := range turns {
			answers = append(answers, turn(tid, tc.cmd, fmt.Sprintf("turn %d", i+1)))
			if got := threadFiles(t, s, tid); !maps.Equal(got, tc.want) {
				t.Fatalf("after turn %d: %v, want %v", i+1, got, tc.want)
			}
		}
		live := liveIDs(t, f, a, tid) // user, assistant per turn
		if len(live) != 6 {
			t.Fatalf("history: %v", live)
		}

		// Each turn in turn, from the last back to the first.
		for _, i := range []int{2, 1, 0} {
			r := s.do("POST", appAPI+"/thread/"+tid+"/rewind", a, map[string]any{"message_id": answers[i]})
			mustStatus(t, fmt.Sprintf("rewind to turn %d", i+1), r, 200)
			if i == 2 && r.status == 200 && len(r.json(t)["replaced"].([]any)) != 0 {
				// Rewinding to the last turn folds nothing the first time.
				if got := liveIDs(t, f, a, tid); len(got) != 6 {
					t.Fatalf("rewind to the last turn folded history: %v", got)
				}
			}
			if got := threadFiles(t, s, tid); !maps.Equal(got, turns[i].want) {
				t.Fatalf("rewound to turn %d: %v, want %v", i+1, got, turns[i].want)
			}
		}
		// Rewound to the first turn: only it is in the history; what
		// came after is an earlier version.
		if got := liveIDs(t, f, a, tid); len(got) != 2 || got[1] != answers[0] {
			t.Fatalf("history after rewinding to turn 1: %v", got)
		}
		// A turn after the rewind starts from the first turn's files.
		turn(tid, fmt.Sprintf("echo after > %s/after.txt", ws), "after the rewind")
		want := maps.Clone(turns[0].want)
		want["workspace/after.txt"] = "after\n"
		if got := threadFiles(t, s, tid); !maps.Equal(got, want) {
			t.Fatalf("a turn after the rewind: %v, want %v", got, want)
		}

		// Bad requests change nothing.
		for _, tc := range []struct {
			body   any
			status int
		}{
			{map[string]any{}, 400},
			{map[string]any{"message_id": live[0]}, 400},    // a user message
			{map[string]any{"message_id": "msg_none"}, 404}, // not the thread's
			{map[string]any{"message_id": answers[1]}, 409}, // an earlier version now
		} {
			r := s.do("POST", appAPI+"/thread/"+tid+"/rewind", a, tc.body)
			if r.status != tc.status || !strings.Contains(string(r.body), `"error"`) {
				t.Fatalf("rewind %v: %d %s, want %d in the error envelope", tc.body, r.status, r.body, tc.status)
			}
		}
		if got := threadFiles(t, s, tid); !maps.Equal(got, want) {
			t.Fatalf("a refused rewind changed the files: %v", got)
		}

		// A second thread, forked at its second turn.
		src := f.thread(t, a, f.pid)
		var srcAnswers []string
		for i, tc := range turns {
			srcAnswers = append(srcAnswers, turn(src, tc.cmd, fmt.Sprintf("turn %d", i+1)))
		}
		r := s.do("POST", appAPI+"/thread/"+src+"/fork", a, map[string]any{"message_id": srcAnswers[1]})
		mustStatus(t, "fork at turn 2", r, 201)
		fork := r.json(t)["id"].(string)
		if got := threadFiles(t, s, fork); !maps.Equal(got, turns[1].want) {
			t.Fatalf("fork at turn 2: %v, want %v", got, turns[1].want)
		}
		if h := f.history(t, a, fork); len(h) != 4 {
			t.Fatalf("fork's history: %d messages, want 4", len(h))
		}
		// Each goes on its own way.
		turn(fork, fmt.Sprintf("echo fork > %s/fork.txt", ws), "in the fork")
		turn(src, fmt.Sprintf("echo parent > %s/parent.txt", ws), "in the parent")
		forkWant := maps.Clone(turns[1].want)
		forkWant["workspace/fork.txt"] = "fork\n"
		parentWant := maps.Clone(turns[2].want)
		parentWant["workspace/parent.txt"] = "parent\n"
		if got := threadFiles(t, s, fork); !maps.Equal(got, forkWant) {
			t.Fatalf("fork after its turn: %v, want %v", got, forkWant)
		}
		if got := threadFiles(t, s, src); !maps.Equal(got, parentWant) {
			t.Fatalf("parent after its turn: %v, want %v", got, parentWant)
		}

		// Refused while a turn runs.
		fake.Push(bashStep("sleep 20"), textStep("slept"))
		body, _ := json.Marshal(map[string]any{"content": "sleep", "stream": true, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
		resp, evs, leave := openSSE(t, "POST", s.base+appAPI+"/thread/"+src+"/messages", a, body)
		defer leave()
		if resp.StatusCode != 200 {
			t.Fatalf("start a long turn: %d", resp.StatusCode)
		}
		for {
			ev, ok := nextEvent(t, evs, 60*time.Second)
			if !ok {
				t.Fatal("the stream ended before the command")
			}
			if strings.Contains(ev.data, `"server_tool_use"`) {
				break
			}
		}
		before := threadFiles(t, s, src)
		r = s.do("POST", appAPI+"/thread/"+src+"/rewind", a, map[string]any{"message_id": srcAnswers[0]})
		if r.status != 409 || !strings.Contains(string(r.body), "a turn is running") {
			t.Fatalf("rewind while a turn runs: %d %s", r.status, r.body)
		}
		if got := threadFiles(t, s, src); !maps.Equal(got, before) {
			t.Fatalf("a refused rewind changed the files: %v", got)
		}
		if r := s.do("POST", appAPI+"/thread/"+src+"/turns/"+resp.Header.Get("Threadbox-Turn-Id")+"/stop", a, nil); r.status/100 != 2 {
			t.Fatalf("stop: %d %s", r.status, r.body)
		}

		// Audited.
		r = s.do("GET", appAPI+"/org/audit", a, nil)
		mustStatus(t, "audit", r, 200)
		if n := strings.Count(string(r.body), `"thread.rewind"`); n != 3 {
			t.Fatalf("audit holds %d rewinds, want 3: %s", n, r.body)
		}
	})
}

// TestSnapshotRetentionAndQuota: a thread keeps at most the org's
// snapshotsPerThread snapshots (the oldest go first, and rewinding to
// one of their turns is refused), the snapshots count toward the storage
// quota, a snapshot that does not fit is not kept, and deleting the
// thread removes them. Files come from uploads, so no sandbox runs.
func TestSnapshotRetentionAndQuota(t *testing.T) {
	databases(t, func(t *testing.T, db string) {
		s, fake := modelServer(t, db, "anthropic", map[string]string{"SWEEP_INTERVAL": "1s"})
		f := newWSFixture(t, s)
		a, tid := f.admin, f.tid
		turn := func(text string) string {
			t.Helper()
			fake.Push(textStep("ok"))
			mustStatus(t, text, s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": text}), 200)
			return lastAnswer(t, f, a, tid)
		}
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"snapshotsPerThread": 2}})
		var answers []string
		for i := range 3 {
			mustStatus(t, "upload", f.upload(t, a, tid, fmt.Sprintf("f%d.txt", i), "f.txt", strings.Repeat("x", 100)), 200)
			answers = append(answers, turn(fmt.Sprintf("turn %d", i+1)))
		}
		if n := snapshotFolders(t, s, tid); n != 2 {
			t.Fatalf("%d snapshots kept, want 2", n)
		}
		r := s.do("POST", appAPI+"/thread/"+tid+"/rewind", a, map[string]any{"message_id": answers[0]})
		if r.status != 409 || !strings.Contains(string(r.body), "no files snapshot") {
			t.Fatalf("rewind past the retention: %d %s", r.status, r.body)
		}
		mustStatus(t, "rewind to turn 2", s.do("POST", appAPI+"/thread/"+tid+"/rewind", a, map[string]any{"message_id": answers[1]}), 200)
		if got := threadFiles(t, s, tid); len(got) != 2 || got["uploads/f0.txt"] == "" || got["uploads/f1.txt"] == "" {
			t.Fatalf("files after rewinding to turn 2: %v", got)
		}

		// The storage quota counts the snapshots: the upload's bytes are
		// held twice, the container's and the snapshot's, and a snapshot
		// that would not fit is not kept.
		other := f.thread(t, a, f.pid)
		tid = other
		const size = 20000
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"snapshotsPerThread": 0, "storageBytesPerOrg": size * 5 / 2}})
		mustStatus(t, "upload", f.upload(t, a, other, "big.bin", "big.bin", strings.Repeat("b", size)), 200)
		turn("snapshot it")
		if n := snapshotFolders(t, s, other); n != 1 {
			t.Fatalf("%d snapshots, want 1", n)
		}
		// Without the snapshot counted, this would fit.
		refused(t, "an upload past the quota with the snapshot", f.upload(t, a, other, "big2.bin", "big2.bin", strings.Repeat("c", size)), 413, "invalid_request_error", `quota "storageBytesPerOrg" exceeded`)
		mustStatus(t, "delete the first thread", s.do("DELETE", appAPI+"/thread/"+f.tid, a, nil), 204)
		// Room for a second file in the container, not for its snapshot
		// too: the turn's snapshot is not kept.
		f.patchFeatures(t, map[string]any{"quotas": map[string]any{"storageBytesPerOrg": size*3 + size/4}})
		mustStatus(t, "upload", f.upload(t, a, other, "big2.bin", "big2.bin", strings.Repeat("c", size)), 200)
		last := turn("no room to snapshot")
		if n := snapshotFolders(t, s, other); n != 1 {
			t.Fatalf("%d snapshots after a turn past the quota, want 1", n)
		}
		r = s.do("POST", appAPI+"/thread/"+other+"/rewind", a, map[string]any{"message_id": last})
		if r.status != 409 {
			t.Fatalf("rewind to a turn whose snapshot did not fit: %d %s", r.status, r.body)
		}
		mustStatus(t, "delete", s.do("DELETE", appAPI+"/thread/"+other, a, nil), 204)
		if n := snapshotFolders(t, s, other); n != 0 {
			t.Fatalf("%d snapshots after the thread was deleted", n)
		}
		if n := snapshotFolders(t, s, f.tid); n != 0 {
			t.Fatalf("%d snapshots of the first thread after it was deleted", n)
		}

		// Snapshots left of a thread that no longer exists are swept;
		// a live thread's stay.
		orphan := filepath.Join(s.dataDir, "snapshots", "thr_gone", "snp_left")
		if err := os.MkdirAll(orphan, 0o700); err != nil {
			t.Fatal(err)
		}
		tid = f.thread(t, a, f.pid)
		mustStatus(t, "upload", f.upload(t, a, tid, "live.txt", "live.txt", "live"), 200)
		turn("a live thread's turn")
		keep := snapshotFolders(t, s, tid)
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := os.Stat(filepath.Dir(orphan)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the orphan snapshots were not swept")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if n := snapshotFolders(t, s, tid); n != keep || n == 0 {
			t.Fatalf("the sweep touched a live thread's snapshots: %d, had %d", n, keep)
		}
	})
}

// snapshotFolders counts a thread's snapshots on the host.
func snapshotFolders(t *testing.T, s *server, tid string) int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(s.dataDir, "snapshots", tid))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(es)
}

// callIDs returns the ids of the sandbox tool calls of a thread's
// message, in order.
func callIDs(t *testing.T, f wsFixture, tok, tid, messageID string) []string {
	t.Helper()
	var out []string
	for _, x := range f.history(t, tok, tid) {
		m := x.(map[string]any)
		if m["id"] != messageID {
			continue
		}
		for _, b := range m["content"].([]any) {
			if b := b.(map[string]any); b["type"] == "server_tool_use" {
				out = append(out, b["id"].(string))
			}
		}
	}
	return out
}

// changeList renders a call's changes as "op path" lines.
func changeList(v map[string]any) []string {
	var out []string
	for _, x := range v["changes"].([]any) {
		c := x.(map[string]any)
		out = append(out, fmt.Sprint(c["op"], " ", c["path"]))
	}
	return out
}

// TestToolCallChangesAndRevert: each sandbox tool call of a turn lists
// the files it created, changed and deleted (an upload between turns is
// not counted to the next call), with a unified diff of text files and
// sizes of others; reverting a call gives back exactly its paths, is
// refused when a later call changed them unless forced, and is audited.
func TestToolCallChangesAndRevert(t *testing.T) {
	bin := needDocker(t)
	databases(t, func(t *testing.T, db string) {
		s, fake := modelServer(t, db, "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
		f := newWSFixture(t, s)
		a, tid := f.admin, f.tid
		const ws = "/home/agent/workspace"
		// One turn, two calls.
		fake.Push(
			bashStep(fmt.Sprintf(`cd %s && echo one > a.txt && echo keep > k.txt && printf '\000\001\002' > bin.dat`, ws)),
			bashStep(fmt.Sprintf(`cd %s && echo two > a.txt && rm k.txt && echo new > n.txt`, ws)),
			textStep("done"))
		r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "two calls", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
		mustStatus(t, "turn 1", r, 200)
		calls := callIDs(t, f, a, tid, lastAnswer(t, f, a, tid))
		// Between turns, an upload; then a turn of one call.
		mustStatus(t, "upload", f.upload(t, a, tid, "up.txt", "up.txt", "uploaded"), 200)
		fake.Push(bashStep(fmt.Sprintf(`echo three > %s/a.txt`, ws)), textStep("done"))
		r = s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "one call", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
		mustStatus(t, "turn 2", r, 200)
		calls = append(calls, callIDs(t, f, a, tid, lastAnswer(t, f, a, tid))...)
		if len(calls) != 3 {
			t.Fatalf("calls: %v", calls)
		}

		// The thread's list, oldest call first.
		r = s.do("GET", appAPI+"/thread/"+tid+"/changes", a, nil)
		mustStatus(t, "thread changes", r, 200)
		all := r.json(t)["data"].([]any)
		want := [][]string{
			{"created workspace/a.txt", "created workspace/bin.dat", "created workspace/k.txt"},
			{"changed workspace/a.txt", "deleted workspace/k.txt", "created workspace/n.txt"},
			{"changed workspace/a.txt"},
		}
		if len(all) != 3 {
			t.Fatalf("thread changes: %s", r.body)
		}
		for i, x := range all {
			v := x.(map[string]any)
			if v["call_id"] != calls[i] || !slices.Equal(changeList(v), want[i]) {
				t.Fatalf("call %d: %v %v, want %s %v", i+1, v["call_id"], changeList(v), calls[i], want[i])
			}
		}

		// One call's changes with diffs.
		r = s.do("GET", appAPI+"/thread/"+tid+"/calls/"+calls[1]+"/changes", a, nil)
		mustStatus(t, "call changes", r, 200)
		ch := r.json(t)["changes"].([]any)
		edit := ch[0].(map[string]any)
		if d, _ := edit["diff"].(string); edit["text"] != true || !strings.Contains(d, "-one\n") || !strings.Contains(d, "+two\n") || edit["size_before"] != 4.0 || edit["size_after"] != 4.0 {
			t.Fatalf("a.txt's change: %v", edit)
		}
		if del := ch[1].(map[string]any); del["size_after"] != nil || !strings.Contains(del["diff"].(string), "-keep") {
			t.Fatalf("k.txt's change: %v", del)
		}
		r = s.do("GET", appAPI+"/thread/"+tid+"/calls/"+calls[0]+"/changes", a, nil)
		mustStatus(t, "first call's changes", r, 200)
		if b := r.json(t)["changes"].([]any)[1].(map[string]any); b["path"] != "workspace/bin.dat" || b["text"] != false || b["diff_omitted"] != "not text" || b["size_after"] != 3.0 {
			t.Fatalf("bin.dat's change: %v", b)
		}
		refused(t, "changes of an unknown call", s.do("GET", appAPI+"/thread/"+tid+"/calls/srvtoolu_none/changes", a, nil), 404, "not_found_error")

		// Reverting the second call is refused: the third changed a.txt.
		before := threadFiles(t, s, tid)
		refused(t, "revert under a later call", s.do("POST", appAPI+"/thread/"+tid+"/calls/"+calls[1]+"/revert", a, nil), 409, "invalid_request_error", "workspace/a.txt", calls[2], "force")
		if got := threadFiles(t, s, tid); !maps.Equal(got, before) {
			t.Fatalf("a refused revert changed the files: %v", got)
		}
		// The third call reverted: a.txt as the second left it.
		r = s.do("POST", appAPI+"/thread/"+tid+"/calls/"+calls[2]+"/revert", a, nil)
		mustStatus(t, "revert the last call", r, 200)
		wantFiles := map[string]string{"workspace/a.txt": "two\n", "workspace/bin.dat": "\x00\x01\x02", "workspace/n.txt": "new\n", "uploads/up.txt": "uploaded"}
		if got := threadFiles(t, s, tid); !maps.Equal(got, wantFiles) {
			t.Fatalf("after reverting the last call: %q, want %q", got, wantFiles)
		}
		// Forced, the second: its paths as the first left them, the
		// upload untouched.
		r = s.do("POST", appAPI+"/thread/"+tid+"/calls/"+calls[1]+"/revert", a, map[string]any{"force": true})
		mustStatus(t, "forced revert", r, 200)
		if v := r.json(t); len(v["restored"].([]any)) != 3 || fmt.Sprint(v["forced"]) != "[workspace/a.txt]" {
			t.Fatalf("forced revert: %s", r.body)
		}
		wantFiles = map[string]string{"workspace/a.txt": "one\n", "workspace/bin.dat": "\x00\x01\x02", "workspace/k.txt": "keep\n", "uploads/up.txt": "uploaded"}
		if got := threadFiles(t, s, tid); !maps.Equal(got, wantFiles) {
			t.Fatalf("after reverting the second call: %q, want %q", got, wantFiles)
		}
		// The sandbox sees the reverted files.
		fake.Push(bashStep(fmt.Sprintf(`cat %s/a.txt %s/k.txt`, ws, ws)), textStep("done"))
		r = s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": "look", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
		mustStatus(t, "turn 3", r, 200)
		if !strings.Contains(string(r.body), `one\nkeep\n`) {
			t.Fatalf("the sandbox reads: %s", r.body)
		}
		r = s.do("GET", appAPI+"/org/audit", a, nil)
		mustStatus(t, "audit", r, 200)
		if n := strings.Count(string(r.body), `"thread.call_revert"`); n != 2 {
			t.Fatalf("audit holds %d reverts, want 2: %s", n, r.body)
		}
	})
}

// TestRewindRunningState: under gVisor a turn's snapshot keeps the
// sandbox's running state with its files. A thread whose turns set a
// Python variable and write, overwrite and delete files is forked at its
// second turn — the fork's interpreter holds that turn's variable, its
// parent's goes on with its own — then rewound to each turn in turn, from
// the last back to the first, each time with that turn's variable and
// files.
func TestRewindRunningState(t *testing.T) {
	bin := needGvisor(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{
		"SANDBOX_BACKEND": "gvisor", "THREADBOX_AGENT_BIN": bin, "THREADBOX_INSTANCE": gvisorInstance(t),
	})
	f := newWSFixture(t, s)
	a := f.admin
	tools := []any{map[string]any{"type": "code_execution_20260120", "name": "code_execution"}}
	const ws = "/home/agent/workspace"
	turn := func(tid, code, text string) string {
		t.Helper()
		fake.Push(steps(pyStep(code)), textStep("done"))
		r := s.do("POST", appAPI+"/thread/"+tid+"/messages", a, map[string]any{"content": text, "pgpt": map[string]any{"tools": tools}})
		mustStatus(t, text, r, 200)
		return lastAnswer(t, f, a, tid)
	}
	// holds checks, with a turn of its own, that the thread's interpreter
	// holds x = want, and that its files are files.
	holds := func(tid string, want int, files map[string]string) {
		t.Helper()
		turn(tid, `print(f"x={x}")`, "what is x?")
		h := f.history(t, a, tid)
		last, _ := json.Marshal(h[len(h)-1])
		if !strings.Contains(string(last), fmt.Sprintf(`x=%d\n`, want)) {
			t.Fatalf("thread %s: the interpreter does not hold x = %d: %s", tid, want, last)
		}
		if got := threadFiles(t, s, tid); !maps.Equal(got, files) {
			t.Fatalf("thread %s: files %v, want %v", tid, got, files)
		}
	}
	turns := []struct {
		code  string
		files map[string]string
	}{
		{fmt.Sprintf("x = 1\nopen('%[1]s/a.txt', 'w').write('one')\nopen('%[1]s/keep.txt', 'w').write('k')", ws),
			map[string]string{"workspace/a.txt": "one", "workspace/keep.txt": "k"}},
		{fmt.Sprintf("x = 2\nopen('%[1]s/a.txt', 'w').write('two')\nopen('%[1]s/b.txt', 'w').write('b')", ws),
			map[string]string{"workspace/a.txt": "two", "workspace/b.txt": "b", "workspace/keep.txt": "k"}},
		{fmt.Sprintf("x = 3\nimport os\nos.remove('%[1]s/a.txt')", ws),
			map[string]string{"workspace/b.txt": "b", "workspace/keep.txt": "k"}},
	}
	var answers []string
	for i, tc := range turns {
		answers = append(answers, turn(f.tid, tc.code, fmt.Sprintf("turn %d", i+1)))
	}

	r := s.do("POST", appAPI+"/thread/"+f.tid+"/fork", a, map[string]any{"message_id": answers[1]})
	mustStatus(t, "fork at turn 2", r, 201)
	fork := r.json(t)["id"].(string)
	holds(fork, 2, turns[1].files)
	holds(f.tid, 3, turns[2].files)

	for _, i := range []int{2, 1, 0} {
		start := time.Now()
		r := s.do("POST", appAPI+"/thread/"+f.tid+"/rewind", a, map[string]any{"message_id": answers[i]})
		mustStatus(t, fmt.Sprintf("rewind to turn %d", i+1), r, 200)
		t.Logf("rewind to turn %d with its running state: %v", i+1, time.Since(start))
		holds(f.tid, i+1, turns[i].files)
	}
}
