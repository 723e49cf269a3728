package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages"
	msgwire "threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/app/workspace"
	"threadbox/domain/thread"
	"threadbox/infra/store/storetest"
)

// liveEvent is one event of a Server-Sent Events stream, as it arrived.
type liveEvent struct {
	id   int64 // 0 when the event has none
	name string
	data string
	at   time.Time
}

// readSSE reads events from r, sending each to out until the stream ends;
// it closes out. Keep-alive pings are not sent: they carry no id, and a
// slow machine sends them between any two events.
func readSSE(r *bufio.Reader, out chan<- liveEvent) {
	defer close(out)
	var ev liveEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.name != "" && ev.name != msgwire.EventPing {
				ev.at = time.Now()
				out <- ev
			}
			ev = liveEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// openSSE starts a request whose answer is an event stream, with its
// events on the returned channel; cancel ends it (the client goes away).
func openSSE(t *testing.T, method, url, tok string, body []byte, hdr ...string) (*http.Response, <-chan liveEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	evs := make(chan liveEvent, 1024)
	go readSSE(bufio.NewReader(resp.Body), evs)
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp, evs, func() { cancel(); resp.Body.Close() }
}

// nextEvent waits for the stream's next event (ok false when it ended).
func nextEvent(t *testing.T, evs <-chan liveEvent, within time.Duration) (liveEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-evs:
		return ev, ok
	case <-time.After(within):
		t.Fatalf("no event within %s", within)
	}
	return liveEvent{}, false
}

// TestDetachedTurnReattachAndStop: a chat turn runs in the server, not in
// its request. Its client goes away mid-command and the command goes on;
// a follower reattaches with Last-Event-ID and gets the rest, each event
// once and in order, the command's output line by line as it is produced
// (threadbox_tool_output events); the owner
// stops it and the turn ends at once with its partial output kept (the
// call's result, shaped as a timeout), a stopped event and the stopped
// state after a reload; the next message does not run the stopped command
// again and shows the model the interruption. Another user's or thread's turn is not found, and a
// Last-Event-ID beyond the log replays nothing.
func TestDetachedTurnReattachAndStop(t *testing.T) {
	bin := needDocker(t)
	s, fake := modelServer(t, "", "anthropic", map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin})
	f := newWSFixture(t, s)
	fake.Push(bashStep("for i in 1 2 3; do echo tick$i; sleep 1; done; sleep 30; echo late > /mnt/user-data/outputs/late.txt"))
	body, _ := json.Marshal(map[string]any{"content": "count, then write it late", "stream": true, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	resp, evs, leave := openSSE(t, "POST", s.base+appAPI+"/thread/"+f.tid+"/messages", f.admin, body)
	turnID := resp.Header.Get("Threadbox-Turn-Id")
	if resp.StatusCode != 200 || !strings.HasPrefix(turnID, "trn_") {
		t.Fatalf("start: %d, turn id %q", resp.StatusCode, turnID)
	}
	var first []liveEvent
	for {
		ev, ok := nextEvent(t, evs, 30*time.Second)
		if !ok {
			t.Fatalf("the stream ended before the command: %+v", first)
		}
		first = append(first, ev)
		if strings.Contains(ev.data, `"server_tool_use"`) {
			break
		}
	}
	leave() // the client goes away mid-command

	// The turn runs on: the thread says so and names it.
	time.Sleep(300 * time.Millisecond)
	r := s.do("GET", appAPI+"/thread/"+f.tid+"/messages", f.admin, nil)
	var listing struct {
		RunningTurnID string `json:"running_turn_id"`
	}
	if json.Unmarshal(r.body, &listing); listing.RunningTurnID != turnID || lastStatus(s, f.admin, f.tid) != "assistant running" {
		t.Fatalf("after the client left: running turn %q, last message %s", listing.RunningTurnID, lastStatus(s, f.admin, f.tid))
	}

	// Not found for another user, or under another thread.
	other := f.thread(t, f.admin, f.pid)
	for _, c := range []struct{ tok, thread string }{{f.member, f.tid}, {f.out, f.tid}, {f.admin, other}} {
		if r := s.do("GET", appAPI+"/thread/"+c.thread+"/turns/"+turnID+"/events", c.tok, nil); r.status != 404 {
			t.Fatalf("events of a turn not the caller's (%s): %d %s", c.thread, r.status, r.body)
		}
		if r := s.do("POST", appAPI+"/thread/"+c.thread+"/turns/"+turnID+"/stop", c.tok, nil); r.status != 404 {
			t.Fatalf("stop of a turn not the caller's: %d %s", r.status, r.body)
		}
	}

	// Reattach from the start: the events the first client saw, the same
	// and in order, then the output as it is produced.
	_, follow, _ := openSSE(t, "GET", s.base+appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events", f.admin, nil, "Last-Event-ID", "0")
	var replay []liveEvent
	for len(replay) < len(first) {
		ev, ok := nextEvent(t, follow, 10*time.Second)
		if !ok {
			t.Fatal("the replay ended early")
		}
		replay = append(replay, ev)
	}
	for i := range first {
		if replay[i].name != first[i].name || replay[i].data != first[i].data || replay[i].id != int64(i+1) {
			t.Fatalf("replayed event %d: %s #%d %s, first seen as %s %s", i, replay[i].name, replay[i].id, replay[i].data, first[i].name, first[i].data)
		}
	}
	// Reattach after the events seen so far: nothing is repeated.
	_, resumed, _ := openSSE(t, "GET", s.base+appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events", f.admin, nil, "Last-Event-ID", strconv.Itoa(len(first)))

	// The command's output arrives as it is produced, line by line.
	var (
		rest    []liveEvent
		outputs []msgwire.ToolOutput
		lines   strings.Builder
	)
	for !strings.Contains(lines.String(), "tick3\n") {
		ev, ok := nextEvent(t, resumed, 10*time.Second)
		if !ok {
			t.Fatalf("the stream ended before the command's third line: %+v", rest)
		}
		rest = append(rest, ev)
		if ev.name == msgwire.EventToolOutput {
			var o msgwire.ToolOutput
			if err := json.Unmarshal([]byte(ev.data), &o); err != nil {
				t.Fatal(err)
			}
			outputs = append(outputs, o)
			lines.WriteString(o.Text)
		}
	}
	if lines.String() != "tick1\ntick2\ntick3\n" || len(outputs) != 3 || outputs[2].ElapsedMs-outputs[0].ElapsedMs < 1500 {
		t.Fatalf("the output as it came: %+v", outputs)
	}
	stopAt := time.Now()
	if r := s.do("POST", appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/stop", f.admin, nil); r.status != 200 {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	for {
		ev, ok := nextEvent(t, resumed, 10*time.Second)
		if !ok {
			break
		}
		rest = append(rest, ev)
	}
	// Well before the command's own end (30 s later), even on a loaded machine.
	if took := time.Since(stopAt); took > 10*time.Second {
		t.Fatalf("the stopped turn's stream ended %s after the stop", took)
	}
	if len(rest) == 0 || rest[0].id != int64(len(first)+1) || rest[len(rest)-1].name != turns.StoppedEvent {
		t.Fatalf("the resumed stream: %+v", rest)
	}
	for i := 1; i < len(rest); i++ {
		if rest[i].id != rest[i-1].id+1 {
			t.Fatalf("events %d and %d follow each other in the resumed stream", rest[i-1].id, rest[i].id)
		}
	}
	// The first follower saw the same events as the second.
	var all []liveEvent
	for {
		ev, ok := nextEvent(t, follow, 10*time.Second)
		if !ok {
			break
		}
		all = append(all, ev)
	}
	if len(all) != len(rest) || all[len(all)-1].name != turns.StoppedEvent {
		t.Fatalf("two followers saw %d and %d events after the replay", len(all), len(rest))
	}
	waitFor(t, 10*time.Second, func() bool { return lastStatus(s, f.admin, f.tid) == "assistant stopped" },
		func() string { return "the stopped turn shows as " + lastStatus(s, f.admin, f.tid) })
	// Stopping again changes nothing; a Last-Event-ID beyond the log
	// replays nothing and ends.
	if r := s.do("POST", appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/stop", f.admin, nil); r.status != 200 || !strings.Contains(string(r.body), `"state":"stopped"`) {
		t.Fatalf("stop again: %d %s", r.status, r.body)
	}
	_, beyond, _ := openSSE(t, "GET", s.base+appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events", f.admin, nil, "Last-Event-ID", "100000")
	if ev, ok := nextEvent(t, beyond, 5*time.Second); ok {
		t.Fatalf("a replay beyond the log sent %+v", ev)
	}
	if r := s.do("GET", appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events?after=x", f.admin, nil); r.status != 400 {
		t.Fatalf("a bad Last-Event-ID: %d %s", r.status, r.body)
	}

	fake.Push(textStep("hi back"))
	r = s.do("POST", appAPI+"/thread/"+f.tid+"/messages", f.admin, map[string]any{"content": "echo hi", "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	if r.status != 200 || !strings.Contains(string(r.body), "hi back") {
		t.Fatalf("next turn: %d %s (refused: %v)", r.status, r.body, fake.Refused())
	}
	// The model sees the stopped call with its result (the output so far,
	// shaped as a timeout), then the note that the answer was
	// stopped; the two user messages stay apart.
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	roles, texts := upstreamMessages(t, last)
	if strings.Join(roles, ",") != "user,assistant,user,assistant,user" {
		t.Fatalf("roles of the next request: %v %v", roles, texts)
	}
	if strings.Join(texts[0], "|") != "text:count, then write it late" || strings.Join(texts[4], "|") != "text:echo hi" ||
		strings.Join(texts[1], "|") != "tool_use:" || strings.Join(texts[2], "|") != "tool_result:" {
		t.Fatalf("the next request's messages: %v", texts)
	}
	if note := strings.Join(texts[3], "|"); note != "text:"+workspace.InterruptedNote(thread.Ending{Reason: thread.Stopped}) {
		t.Fatalf("the interruption as the model sees it: %v", note)
	}
	for _, want := range []string{"tick1", "tick3", messages.StoppedNote, `124`} {
		if !strings.Contains(string(last.Body), want) {
			t.Fatalf("the stopped call's result lacks %q: %s", want, last.Body)
		}
	}
	if dl := s.do("GET", appAPI+"/thread/"+f.tid+"/download-file?path=/mnt/user-data/outputs/late.txt", f.admin, nil); dl.status == 200 {
		t.Fatalf("the stopped command ran on: late.txt is %q", dl.body)
	}
	if refused := fake.Refused(); len(refused) != 0 {
		t.Fatalf("refused upstream: %v", refused)
	}
}

// TestDetachedTurnAcrossServers: two servers share a PostgreSQL database.
// A turn runs on the first; a follower on each server sees the same events
// (the second reads them from the database), and a Stop sent to the second
// server ends the turn on the first, both streams ending with the stopped
// event.
func TestDetachedTurnAcrossServers(t *testing.T) {
	bin := needDocker(t)
	dbURL := storetest.PostgresURL(t)
	env := childEnv(t, dbURL, map[string]string{"SANDBOX_BACKEND": "docker", "THREADBOX_AGENT_BIN": bin, "MODEL_PROVIDER": "runner"})
	env["JWT_KEY_FILE"] = filepath.Join(filepath.Dir(env["DATA_DIR"]), "jwt.pem")
	one := startChild(t, env)
	env2 := maps.Clone(env)
	env2["LISTEN_ADDR"] = freeAddr(t)
	two := startChild(t, env2)
	f := newWSFixture(t, one.server)

	body, _ := json.Marshal(map[string]any{"content": "```bash\nfor i in $(seq 1 30); do echo tick$i; sleep 0.5; done\n```", "stream": true, "pgpt": map[string]any{"tools": []any{"code_execution"}}})
	resp, _, _ := openSSE(t, "POST", one.base+appAPI+"/thread/"+f.tid+"/messages", f.admin, body)
	turnID := resp.Header.Get("Threadbox-Turn-Id")
	if resp.StatusCode != 200 || turnID == "" {
		t.Fatalf("start: %d %q", resp.StatusCode, turnID)
	}
	events := func(base string) <-chan liveEvent {
		_, evs, _ := openSSE(t, "GET", base+appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/events", f.admin, nil)
		return evs
	}
	here, there := events(one.base), events(two.base)
	read := func(evs <-chan liveEvent, until func(liveEvent) bool) []liveEvent {
		var out []liveEvent
		for {
			ev, ok := nextEvent(t, evs, 30*time.Second)
			if !ok {
				return out
			}
			out = append(out, ev)
			if until != nil && until(ev) {
				return out
			}
		}
	}
	// The second server's follower sees the command's output as it comes.
	seen := read(there, func(ev liveEvent) bool { return strings.Contains(ev.data, "tick3") })
	stopAt := time.Now()
	if r := two.do("POST", appAPI+"/thread/"+f.tid+"/turns/"+turnID+"/stop", f.admin, nil); r.status != 200 {
		t.Fatalf("stop on the other server: %d %s", r.status, r.body)
	}
	rest := read(there, nil)
	all := append(seen, rest...)
	if took := time.Since(stopAt); took > 3*time.Second || len(rest) == 0 || rest[len(rest)-1].name != turns.StoppedEvent {
		t.Fatalf("after a stop on the other server (%s): %+v", took, rest)
	}
	mine := read(here, nil)
	if len(mine) != len(all) {
		t.Fatalf("the two servers' followers saw %d and %d events", len(mine), len(all))
	}
	for i := range mine {
		if mine[i].id != all[i].id || mine[i].name != all[i].name || mine[i].data != all[i].data {
			t.Fatalf("event %d differs: %+v and %+v", i, mine[i], all[i])
		}
	}
	waitFor(t, 10*time.Second, func() bool { return lastStatus(two.server, f.admin, f.tid) == "assistant stopped" },
		func() string { return "the stopped turn shows as " + lastStatus(two.server, f.admin, f.tid) })
}

// TestStopWhileTheTitleIsWritten: a stop that comes once the answer is
// whole, while the turn asks the model for a new thread's title, cuts that
// request short: the turn's log ends with the stopped event while the
// model still holds the title back, the whole answer is stored complete,
// and the thread keeps the title proposed from its first line.
func TestStopWhileTheTitleIsWritten(t *testing.T) {
	s, fake := modelServer(t, "", "anthropic", nil)
	f := newWSFixture(t, s)
	r := s.do("POST", appAPI+"/thread", f.admin, map[string]any{"project_id": f.pid})
	if r.status != 201 {
		t.Fatalf("thread: %d %s", r.status, r.body)
	}
	tid := r.json(t)["id"].(string)
	held := make(chan struct{})
	defer close(held)
	title := textStep("Never written")
	title.Gate = held
	fake.Push(textStep("North sold more."), title)
	body, _ := json.Marshal(map[string]any{"content": "Sales check\nWhich region sold more?", "stream": true})
	resp, evs, _ := openSSE(t, "POST", s.base+appAPI+"/thread/"+tid+"/messages", f.admin, body)
	turnID := resp.Header.Get("Threadbox-Turn-Id")
	if resp.StatusCode != 200 || turnID == "" {
		t.Fatalf("start: %d, turn id %q", resp.StatusCode, turnID)
	}
	for {
		ev, ok := nextEvent(t, evs, 30*time.Second)
		if !ok {
			t.Fatal("the stream ended before the answer did")
		}
		if ev.name == msgwire.EventMessageStop {
			break
		}
	}
	waitFor(t, 10*time.Second, func() bool { return len(fake.Requests()) == 2 },
		func() string {
			return fmt.Sprintf("%d model requests, want the answer's and the title's", len(fake.Requests()))
		})
	if r := s.do("POST", appAPI+"/thread/"+tid+"/turns/"+turnID+"/stop", f.admin, nil); r.status != 200 {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	// The title's request is bounded at 20 s: a stop that waited for it
	// would leave the stream quiet past the 10 s each event is given.
	var last liveEvent
	for {
		ev, ok := nextEvent(t, evs, 10*time.Second)
		if !ok {
			break
		}
		last = ev
	}
	if last.name != turns.StoppedEvent {
		t.Fatalf("the stream ended with %q %s, want the stopped event", last.name, last.data)
	}
	if got := lastStatus(s, f.admin, tid); got != "assistant complete" {
		t.Errorf("the whole answer is stored as %q, want assistant complete", got)
	}
	if got := s.do("GET", appAPI+"/thread/"+tid, f.admin, nil).json(t)["title"]; got != "Sales check" {
		t.Errorf("title %v, want the first line", got)
	}
	if got := fake.Refused(); len(got) > 0 {
		t.Fatalf("the upstream refused: %q", got)
	}
}
