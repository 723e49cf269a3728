package main

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"threadbox/infra/llm/fakeupstream"
)

// terminalCommand starts an interactive shell that prints a line before
// the prompt: what a viewer who joins later gets replayed.
const terminalCommand = `export PS1='$ '; echo before-join; exec bash --norc --noprofile -i`

// startTerminal runs a turn of the Messages API in the thread's container
// (its id) whose model starts terminalCommand with exec_command, and
// returns the running session's id.
func startTerminal(t *testing.T, s *server, fake *fakeupstream.Server, tok, threadID string) string {
	t.Helper()
	fake.Push(steps(call("exec_command", map[string]any{"command": terminalCommand, "grace_seconds": 1})), textStep("started"))
	calls, _ := sandboxTurn(t, msgClient(s, tok), threadID)
	sid := calls[0].str("session_id")
	if sid == "" || calls[0].Content["alive"] != true || !strings.Contains(calls[0].str("stdout"), "before-join") {
		t.Fatalf("exec_command: %v", calls[0].Content)
	}
	return sid
}

// terminalText follows a terminal output stream, decoding its output
// events, until what arrived contains want; it returns the text and the
// last event id (the byte cursor).
func terminalText(t *testing.T, evs <-chan liveEvent, want string) (string, int64) {
	t.Helper()
	var text strings.Builder
	var last int64
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(text.String(), want) {
		ev, ok := nextEvent(t, evs, time.Until(deadline))
		if !ok {
			t.Fatalf("the stream ended before %q arrived; it had %q", want, text.String())
		}
		if ev.name != "output" {
			continue
		}
		var out struct {
			Data   string `json:"data"`
			Cursor int64  `json:"cursor"`
		}
		if err := json.Unmarshal([]byte(ev.data), &out); err != nil {
			t.Fatalf("output event %q: %v", ev.data, err)
		}
		b, err := base64.StdEncoding.DecodeString(out.Data)
		if err != nil || ev.id != out.Cursor {
			t.Fatalf("output event %q (id %d): %v", ev.data, ev.id, err)
		}
		text.Write(b)
		last = ev.id
	}
	return text.String(), last
}

// TestThreadTerminalAPI: a thread's exec_command session, started by the
// model in the thread's Docker sandbox, is listed for the thread; its
// owner's stream replays the output from before they joined and follows
// it live; what the owner types runs, is seen by every watcher and is in
// the audit log; a watcher that resumes from a cursor gets only what came
// after it; an admin of the org watches but may not type; another member
// finds no such thread; the session's end ends the streams with its exit.
func TestThreadTerminalAPI(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	admin := s.bootstrap("acme", "admin@acme.test")
	for _, email := range []string{"bob@acme.test", "carol@acme.test"} {
		if r := s.do("POST", appAPI+"/org/users", admin, map[string]any{"email": email, "password": "member-password-1"}); r.status != 201 {
			t.Fatalf("create %s: %d %s", email, r.status, r.body)
		}
	}
	bob, carol := apiLogin(t, s, "bob@acme.test", "member-password-1"), apiLogin(t, s, "carol@acme.test", "member-password-1")
	pid := s.do("POST", appAPI+"/project", bob, map[string]any{"name": "Terminals"}).json(t)["id"]
	tid := s.do("POST", appAPI+"/thread", bob, map[string]any{"project_id": pid, "title": "Shell"}).json(t)["id"].(string)
	base := appAPI + "/thread/" + tid + "/terminals"

	if r := s.do("GET", base, bob, nil); r.status != 200 || string(r.body) != `{"data":[],"has_more":false,"can_type":true}` {
		t.Fatalf("no sessions yet: %d %s", r.status, r.body)
	}
	sid := startTerminal(t, s, fake, bob, tid)
	sbase := base + "/" + sid

	r := s.do("GET", base, bob, nil)
	list := r.json(t)
	data, _ := list["data"].([]any)
	if r.status != 200 || list["can_type"] != true || len(data) != 1 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	sess := data[0].(map[string]any)
	if sess["id"] != sid || sess["command"] != terminalCommand || sess["status"] != "running" || sess["exit_code"] != nil || sess["rows"] != 24.0 || sess["cols"] != 80.0 || sess["cursor"].(float64) <= 0 {
		t.Fatalf("session: %v", sess)
	}

	// Another member of the org finds no such thread; an admin watches.
	for _, c := range []struct{ method, path string }{{"GET", base}, {"GET", sbase + "/output"}, {"POST", sbase + "/input"}} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"data": "id\r"}
		}
		if r := s.do(c.method, c.path, carol, body); r.status != 404 || r.errorType(t) != "not_found_error" {
			t.Errorf("%s %s as another member: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	if r := s.do("GET", base, admin, nil); r.status != 200 || r.json(t)["can_type"] != false || !strings.Contains(string(r.body), sid) {
		t.Fatalf("list as an admin: %d %s", r.status, r.body)
	}
	if r := s.do("POST", sbase+"/input", admin, map[string]any{"data": "id\r"}); r.status != 403 || !strings.Contains(string(r.body), "only the thread's owner may type") {
		t.Fatalf("input as an admin: %d %s", r.status, r.body)
	}

	// The owner joins: the output from before is replayed, then typing runs.
	resp, owner, _ := openSSE(t, "GET", s.base+sbase+"/output", bob, nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	replayed, joined := terminalText(t, owner, "$ ")
	if !strings.HasPrefix(replayed, "before-join") {
		t.Fatalf("replay: %q", replayed)
	}
	_, watcher, _ := openSSE(t, "GET", s.base+sbase+"/output", admin, nil, "Last-Event-ID", strconv.FormatInt(joined, 10))
	if r := s.do("POST", sbase+"/input", bob, map[string]any{"data": "echo typed-$((6*7))\r"}); r.status != 200 || r.json(t)["bytes"] != 20.0 {
		t.Fatalf("input: %d %s", r.status, r.body)
	}
	if got, _ := terminalText(t, owner, "typed-42"); !strings.Contains(got, "echo typed-$((6*7))") {
		t.Fatalf("the owner's stream: %q", got)
	}
	if got, _ := terminalText(t, watcher, "typed-42"); strings.Contains(got, "before-join") {
		t.Fatalf("a watcher resuming at %d got the output before it again: %q", joined, got)
	}

	// Each input is in the audit log, with what was typed.
	evs := auditEvents(t, s, admin, "terminal.input")
	if len(evs) != 1 || evs[0]["target"] != tid || evs[0]["actor_email"] != "bob@acme.test" {
		t.Fatalf("audit: %v", evs)
	}
	if after := evs[0]["after"].(map[string]any); after["session_id"] != sid || after["input"] != "echo typed-$((6*7))\r" || after["bytes"] != 20.0 {
		t.Fatalf("audited input: %v", after)
	}

	// Bad input is refused with the API's envelope.
	for _, c := range []struct {
		path string
		body any
		code int
	}{
		{sbase + "/input", map[string]any{"data": ""}, 400},
		{sbase + "/input", map[string]any{"data": strings.Repeat("x", 64<<10+1)}, 413},
		{base + "/sess_nothere/input", map[string]any{"data": "x"}, 404},
	} {
		if r := s.do("POST", c.path, bob, c.body); r.status != c.code || r.errorType(t) == "" {
			t.Errorf("POST %s: %d %s, want %d", c.path, r.status, r.body, c.code)
		}
	}
	if r := s.do("GET", base+"/sess_nothere/output", bob, nil); r.status != 404 {
		t.Errorf("stream of no session: %d %s", r.status, r.body)
	}
	if r := s.do("GET", sbase+"/output?after=x", bob, nil); r.status != 400 {
		t.Errorf("stream after a bad cursor: %d %s", r.status, r.body)
	}

	// The session ends: every stream ends with its exit.
	if r := s.do("POST", sbase+"/input", bob, map[string]any{"data": "exit 3\r"}); r.status != 200 {
		t.Fatalf("exit: %d %s", r.status, r.body)
	}
	for name, evs := range map[string]<-chan liveEvent{"owner": owner, "watcher": watcher} {
		for {
			ev, ok := nextEvent(t, evs, 20*time.Second)
			if !ok {
				t.Fatalf("%s: the stream ended without an exit event", name)
			}
			if ev.name == "exit" {
				if !strings.Contains(ev.data, `"status":"exited","exit_code":3`) {
					t.Fatalf("%s: exit %s", name, ev.data)
				}
				break
			}
		}
	}
	if r := s.do("POST", sbase+"/input", bob, map[string]any{"data": "x"}); r.status != 409 {
		t.Errorf("input to an ended session: %d %s", r.status, r.body)
	}
}
