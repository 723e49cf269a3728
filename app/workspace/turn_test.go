package workspace

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/app/turns/turnstest"
	"threadbox/domain/artifact"
	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/org"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// scriptEngine plays a fixed turn: a text block, a server call with its
// result (calling the tool hook), then fails or finishes.
type scriptEngine struct {
	fail error
	stop context.CancelFunc // when set, the turn is stopped (its context ends) instead
}

func (e scriptEngine) Run(ctx context.Context, _ user.Principal, req *wire.Request, opts messages.RunOptions, sink messages.Sink) error {
	send := func(evs ...wire.Event) error {
		for _, ev := range evs {
			if err := sink.Send(ev); err != nil {
				return err
			}
		}
		return nil
	}
	text := wire.ContentBlock{Type: wire.BlockText, Text: "Running."}
	call := wire.ContentBlock{Type: wire.BlockServerToolUse, ID: "srvtoolu_1", Name: wire.SubToolBash, Input: []byte(`{"command":"x"}`)}
	res := wire.ContentBlock{Type: wire.BlockBashResult, ToolUseID: "srvtoolu_1", Result: &wire.ToolResult{Type: wire.ResultBash}}
	if err := send(wire.Event{Type: wire.EventMessageStart, Message: &wire.Response{ID: "msg_1", Type: "message", Role: "assistant"}},
		wire.Event{Type: wire.EventContentBlockStart, Index: 0, ContentBlock: &text},
		wire.Event{Type: wire.EventContentBlockStop, Index: 0},
		wire.Event{Type: wire.EventContentBlockStart, Index: 1, ContentBlock: &call},
		wire.Event{Type: wire.EventContentBlockStop, Index: 1},
		wire.Event{Type: wire.EventContentBlockStart, Index: 2, ContentBlock: &res},
		wire.Event{Type: wire.EventContentBlockStop, Index: 2}); err != nil {
		return err
	}
	opts.OnToolCall(ctx, messages.ToolCall{ID: "srvtoolu_1", Name: wire.SubToolBash, ContainerID: opts.ContainerID}, res.Result)
	if e.stop != nil {
		e.stop()
		return ctx.Err()
	}
	if e.fail != nil {
		return e.fail
	}
	done := wire.ContentBlock{Type: wire.BlockText, Text: "Done."}
	return send(wire.Event{Type: wire.EventContentBlockStart, Index: 3, ContentBlock: &done},
		wire.Event{Type: wire.EventContentBlockStop, Index: 3},
		wire.Event{Type: wire.EventMessageDelta, MessageDelta: &wire.MessageDelta{StopReason: "end_turn"}, Usage: &wire.Usage{}},
		wire.Event{Type: wire.EventMessageStop})
}

// engine plays a turn in place of the tool loop.
type engine interface {
	Run(ctx context.Context, p user.Principal, req *wire.Request, opts messages.RunOptions, sink messages.Sink) error
}

// loop is the tool loop app/turns runs a test's engine with: requests are
// checked as the tool loop checks them.
type loop struct{ eng engine }

func (loop) Validate(req *wire.Request) (*messages.Plan, error) {
	return messages.New(nil, messages.Tools{}, messages.Config{}).Validate(req)
}

func (l loop) Run(ctx context.Context, req *wire.Request, opts messages.RunOptions, sink messages.Sink) error {
	return l.eng.Run(ctx, user.Principal{OrgID: opts.OrgID, UserID: opts.UserID}, req, opts, sink)
}

// oneContainer resolves every thread to its own container.
type oneContainer struct{}

func (oneContainer) Scope(_ context.Context, p user.Principal, id string, _ bool) (container.Container, error) {
	return container.NewForThread(p.OrgID, p.UserID, id, time.Now())
}
func (c oneContainer) Peek(ctx context.Context, p user.Principal, id string) (container.Container, bool, error) {
	ct, err := c.Scope(ctx, p, id, false)
	return ct, err == nil, err
}
func (oneContainer) ForUser(context.Context, user.Principal, string) (container.Container, error) {
	return container.Container{}, errors.New("a chat turn runs in its thread's container")
}
func (oneContainer) Touch(_ context.Context, c container.Container) (container.Container, error) {
	return c.Touch(time.Now()), nil
}
func (oneContainer) MarkSkills(_ context.Context, c container.Container, may bool) (container.Container, error) {
	return c.WithSkills(may), nil
}
func (oneContainer) ExpiresAt(container.Container) time.Time { return time.Now().Add(time.Hour) }
func (oneContainer) Remove(context.Context, string) error    { return nil }
func (oneContainer) OrgPolicy(context.Context, string) (org.Policy, error) {
	return org.DefaultPolicy(), nil
}

// outputs is a container with one output file.
type outputs struct {
	readOnly
	data   string
	synced []string // files synced, in order
}

func (o *outputs) SyncFile(_ context.Context, _, p string) error {
	o.synced = append(o.synced, p)
	return nil
}

func (o *outputs) Walk(context.Context, string, string) ([]file.Info, error) {
	return []file.Info{{Rel: "chart.png", Size: int64(len(o.data)), Modified: time.Unix(int64(len(o.data)), 0)}}, nil
}
func (o *outputs) Open(context.Context, string, string) (io.ReadSeekCloser, file.Info, error) {
	return nopCloser{strings.NewReader(o.data)}, file.Info{Rel: "chart.png", Size: int64(len(o.data))}, nil
}

// readOnly is the writing half of a fake container's files that takes no
// writes and syncs nothing.
type readOnly struct{}

func (readOnly) Write(context.Context, string, string, io.Reader, int64) (file.Info, error) {
	return file.Info{}, errors.New("read-only fake")
}
func (readOnly) CopyFile(context.Context, string, string, string, int64) (file.Info, int64, error) {
	return file.Info{}, 0, errors.New("read-only fake")
}
func (readOnly) SyncFile(context.Context, string, string) error { return nil }

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// projectThread makes p a project "P" holding a thread "T".
func projectThread(t *testing.T, ctx context.Context, svc *Service, p user.Principal) thread.Thread {
	t.Helper()
	pr, err := svc.CreateProject(ctx, p, "P")
	if err != nil {
		t.Fatal(err)
	}
	th, err := svc.CreateThread(ctx, p, pr.ID(), "T")
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func setup(t *testing.T, eng engine) (*Service, *memStore, user.Principal, thread.Thread) {
	t.Helper()
	return setupQuota(t, eng, nil)
}

// setupQuota is setup with q (nil: none) asked by the turns and the
// workspace.
func setupQuota(t *testing.T, eng engine, q *fakeQuota) (*Service, *memStore, user.Principal, thread.Thread) {
	t.Helper()
	return setupWith(t, eng, func(td *turns.Deps, d *Deps) {
		if q != nil {
			td.Quota, d.Quota = q, q
		}
	})
}

// setupWith is setup with the turns' and the workspace's ports adjusted.
func setupWith(t *testing.T, eng engine, adjust func(*turns.Deps, *Deps)) (*Service, *memStore, user.Principal, thread.Thread) {
	t.Helper()
	ctx := context.Background()
	st := newMemStore()
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	td := turns.Deps{Engine: loop{eng}, Containers: oneContainer{}, Records: turnstest.NewRecords()}
	d := Deps{Containers: oneContainer{}, Policies: oneContainer{}, Container: &outputs{data: "\x89PNG\r\n\x1a\nv1"}, Blobs: &memBlobs{written: map[string]time.Time{}}}
	adjust(&td, &d)
	d.Turns = turns.New(td)
	svc := New(st, st, d)
	th := projectThread(t, ctx, svc, p)
	return svc, st, p, th
}

func TestTurnInjectsResourceAfterToolResult(t *testing.T) {
	ctx := context.Background()
	svc, st, p, th := setup(t, scriptEngine{})
	turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	var starts []string
	var idx []int
	resp, err := turn.Run(ctx, messages.SinkFunc(func(ev wire.Event) error {
		if ev.Type == wire.EventContentBlockStart {
			starts = append(starts, ev.ContentBlock.Type)
			idx = append(idx, ev.Index)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"text", "server_tool_use", "bash_code_execution_tool_result", BlockResource, BlockTiming, "text"}
	if strings.Join(starts, ",") != strings.Join(want, ",") {
		t.Fatalf("blocks %v, want %v", starts, want)
	}
	for i, n := range idx {
		if n != i {
			t.Fatalf("indexes %v are not 0..n", idx)
		}
	}
	if len(resp.Content) != 6 || resp.Content[3].Type != BlockResource || !bytes.Contains(resp.Content[4].Raw, []byte(`"tool_use_id":"srvtoolu_1","duration_ms":`)) {
		t.Fatalf("response content: %+v", resp.Content)
	}
	ms, _ := st.Messages(ctx, th.ID())
	if len(ms) != 2 || !ms[1].Complete() || !bytes.Contains(ms[1].Content(), []byte(`"zylon-resource"`)) || !bytes.Contains(ms[1].Content(), []byte(`"zylon-timing"`)) {
		t.Fatalf("stored: %d messages", len(ms))
	}
	// The model's history leaves both out.
	hist, err := modelHistory(ms)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range hist {
		for _, b := range m.Content {
			if b.Type == BlockResource || b.Type == BlockTiming {
				t.Fatalf("the model's history holds a %s block", b.Type)
			}
		}
	}
	arts, _, _ := svc.Artifacts(ctx, p, th.ProjectID(), artifact.Page{})
	if len(arts) != 1 || arts[0].Version != 1 || arts[0].ToolUseID != "srvtoolu_1" || arts[0].MimeType != "image/png" {
		t.Fatalf("artifacts: %+v", arts)
	}
	// The announced output was made durable before it was announced: that
	// file alone, not the outputs folder's whole file system.
	if o := svc.d.Container.(*outputs); len(o.synced) != 1 || o.synced[0] != "/mnt/user-data/outputs/chart.png" {
		t.Fatalf("synced %q, want the announced file once", o.synced)
	}
	// The same file unchanged in a second turn is no new artifact; the
	// next turn's history leaves the resource block out.
	h, err := svc.history(ctx, th.ID())
	if err != nil || len(h) != 2 {
		t.Fatalf("history: %v %v", h, err)
	}
	for _, b := range h[1].Content {
		if b.Type == BlockResource {
			t.Fatal("resource block sent to the model")
		}
	}
}

// TestInterruptedTurnKeepsItsPlace: a turn that fails or is stopped keeps
// what it produced, incomplete for good, with why it ended; the next
// turn's history shows the model that, and never merges the next request
// into it.
func TestInterruptedTurnKeepsItsPlace(t *testing.T) {
	tests := []struct {
		name    string
		fail    error
		stop    bool
		want    thread.Ending
		noteHas string
	}{
		{"failed", fault.New(fault.Unavailable, "the model is overloaded"), false, thread.Ending{Reason: thread.Failed, Detail: "the model is overloaded"}, "failed before it finished (the model is overloaded)"},
		{"stopped", nil, true, thread.Ending{Reason: thread.Stopped}, "stopped by the user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			eng := scriptEngine{fail: tt.fail}
			if tt.stop {
				eng.stop = cancel
			}
			svc, st, p, th := setup(t, eng)
			turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "again"}}}); err == nil {
				t.Fatal("a second turn started while one runs")
			}
			if _, err := turn.Run(ctx, nil); err == nil {
				t.Fatal("the interruption was not reported")
			}
			bg := context.Background()
			ms, _ := st.Messages(bg, th.ID())
			if len(ms) != 2 || !ms[0].Complete() || ms[1].Complete() || !bytes.Contains(ms[1].Content(), []byte("Running.")) {
				t.Fatalf("stored after the turn: %d messages, assistant complete=%v %s", len(ms), len(ms) > 1 && ms[1].Complete(), ms[len(ms)-1].Content())
			}
			if got := ms[1].Ended(); got != tt.want {
				t.Fatalf("stored ending %+v, want %+v", got, tt.want)
			}
			h, _ := svc.history(bg, th.ID())
			if len(h) != 2 || h[0].Role != "user" || h[1].Role != "assistant" {
				t.Fatalf("history after the turn: %+v", h)
			}
			last := h[1].Content
			if note := last[len(last)-1].Text; last[0].Text != "Running." || note != InterruptedNote(tt.want) || !strings.Contains(note, tt.noteHas) {
				t.Fatalf("the interrupted turn in the history: %+v", last)
			}
			// The thread is free again.
			next, err := svc.StartTurn(bg, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "again"}}})
			if err != nil {
				t.Fatal(err)
			}
			next.Abort()
		})
	}
}

// bigOutputs lists one output file of the given apparent size whose
// content never ends (a sparse file, or one still growing).
type bigOutputs struct {
	readOnly
	size int64
}

func (o bigOutputs) Walk(context.Context, string, string) ([]file.Info, error) {
	return []file.Info{{Rel: "huge.bin", Size: o.size, Modified: time.Unix(1, 0)}}, nil
}
func (o bigOutputs) Open(context.Context, string, string) (io.ReadSeekCloser, file.Info, error) {
	return endless{}, file.Info{Rel: "huge.bin", Size: o.size}, nil
}

type endless struct{}

func (endless) Read(p []byte) (int, error)     { clear(p); return len(p), nil }
func (endless) Seek(int64, int) (int64, error) { return 0, nil }
func (endless) Close() error                   { return nil }

// TestArtifactCaptureIsBounded: an output past MaxArtifactBytes (listed so,
// or growing while it is copied) is not copied to the host's artifact
// store; the turn completes without an artifact.
func TestArtifactCaptureIsBounded(t *testing.T) {
	for _, size := range []int64{15 << 40, 10} { // listed huge; listed small but endless
		ctx := context.Background()
		svc, _, p, th := setup(t, scriptEngine{})
		svc.d.Container = bigOutputs{size: size}
		svc.d.MaxArtifactBytes = 1 << 10
		turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := turn.Run(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.Content {
			if b.Type == BlockResource {
				t.Fatalf("size %d: an artifact block for an output past the cap", size)
			}
		}
		if arts, _, _ := svc.Artifacts(ctx, p, th.ProjectID(), artifact.Page{}); len(arts) != 0 {
			t.Fatalf("size %d: artifacts %+v", size, arts)
		}
	}
}

// removals records the containers removed.
type removals struct {
	oneContainer
	ids []string
}

func (r *removals) Remove(_ context.Context, id string) error { r.ids = append(r.ids, id); return nil }

// TestDeleteProjectRemovesThreadContainers: deleting a project removes the
// containers (sandboxes and files) of all its threads, other members'
// private threads too; the database alone would leave them on the host.
func TestDeleteProjectRemovesThreadContainers(t *testing.T) {
	ctx := context.Background()
	svc, _, p, th := setup(t, scriptEngine{})
	theirs, err := svc.CreateThread(ctx, user.Principal{OrgID: p.OrgID, UserID: "usr_2", Role: user.Member}, th.ProjectID(), "theirs")
	if err != nil {
		t.Fatal(err)
	}
	rec := &removals{}
	svc.d.Containers = rec
	if err := svc.DeleteProject(ctx, p, th.ProjectID()); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.ids)
	want := []string{th.ContainerID(), theirs.ContainerID()}
	slices.Sort(want)
	if !slices.Equal(rec.ids, want) {
		t.Fatalf("removed %v, want %v", rec.ids, want)
	}
}

func TestInterruptedCallsBecomeNotes(t *testing.T) {
	blocks := []wire.ContentBlock{
		{Type: wire.BlockText, Text: "Running."},
		{Type: wire.BlockServerToolUse, ID: "s1", Name: wire.SubToolBash, Input: []byte(`{"command":"ls"}`)},
		{Type: wire.BlockBashResult, ToolUseID: "s1", Result: &wire.ToolResult{Type: wire.ResultBash}},
		{Type: wire.BlockServerToolUse, ID: "s2", Name: wire.SubToolBash, Input: []byte(`{"command":"sleep 20"}`)},
	}
	got := interrupted(blocks)
	if len(got) != 4 || got[1].Type != wire.BlockServerToolUse || got[3].Type != wire.BlockText ||
		got[3].Text != `[The call bash_code_execution with input {"command":"sleep 20"} was interrupted before it ended; its result is unknown.]` {
		t.Fatalf("got %+v", got)
	}
	if blocks[3].Type != wire.BlockServerToolUse {
		t.Fatal("the stored blocks were changed")
	}
}

// unavailableOnce fails its first artifact write as a restarting database
// does.
type unavailableOnce struct {
	Artifacts
	failed bool
}

func (s *unavailableOnce) CreateArtifact(ctx context.Context, a artifact.Artifact) error {
	if !s.failed {
		s.failed = true
		return fault.New(fault.Unavailable, "the database is unavailable (restarting or unreachable); try again shortly")
	}
	return s.Artifacts.CreateArtifact(ctx, a)
}

// TestCaptureWaitsForTheDatabase: an output captured while the database
// restarts is still announced with its turn (the chaos run's pg-restart
// once left an acknowledged turn without its artifact).
func TestCaptureWaitsForTheDatabase(t *testing.T) {
	ctx := context.Background()
	svc, _, p, th := setup(t, scriptEngine{})
	flaky := &unavailableOnce{Artifacts: svc.artifacts}
	svc.artifacts = flaky
	turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: []wire.ContentBlock{{Type: "text", Text: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := turn.Run(ctx, messages.SinkFunc(func(wire.Event) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if !flaky.failed || len(resp.Content) != 6 || resp.Content[3].Type != BlockResource {
		t.Fatalf("failed once %v; content %+v, want the resource block after the retry", flaky.failed, resp.Content)
	}
}

// TestTimingOfACall: a call's duration runs from the end of its input to
// its tool hook; a call the stream did not show has none.
func TestTimingOfACall(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &resourceSink{last: -1, now: func() time.Time { return at }}
	call := wire.ContentBlock{Type: wire.BlockServerToolUse, ID: "srvtoolu_1", Name: "bash_code_execution"}
	for _, ev := range []wire.Event{
		{Type: wire.EventContentBlockStart, Index: 0, ContentBlock: &wire.ContentBlock{Type: wire.BlockText}},
		{Type: wire.EventContentBlockStop, Index: 0},
		{Type: wire.EventContentBlockStart, Index: 1, ContentBlock: &call},
		{Type: wire.EventContentBlockStop, Index: 1},
	} {
		if err := r.Send(ev); err != nil {
			t.Fatal(err)
		}
	}
	at = at.Add(2500 * time.Millisecond)
	if took, ok := r.took("srvtoolu_1"); !ok || took != 2500*time.Millisecond {
		t.Fatalf("took %v %v, want 2.5s", took, ok)
	}
	if _, ok := r.took("srvtoolu_1"); ok {
		t.Fatal("a call timed twice")
	}
	if _, ok := r.took("srvtoolu_from_code"); ok {
		t.Fatal("a call the stream did not show was timed")
	}
	if got := string(timingBlock("srvtoolu_1", 2500*time.Millisecond).Raw); got != `{"type":"zylon-timing","tool_use_id":"srvtoolu_1","duration_ms":2500}` {
		t.Fatalf("the timing block: %s", got)
	}
}
