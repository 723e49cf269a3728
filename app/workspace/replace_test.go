package workspace

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/app/turns/turnstest"
	"threadbox/domain/fault"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// recordEngine plays scriptEngine's turn and keeps each request's
// conversation, as role:text lines.
type recordEngine struct {
	scriptEngine
	seen *[]string
}

func (e recordEngine) Run(ctx context.Context, p user.Principal, req *wire.Request, opts messages.RunOptions, sink messages.Sink) error {
	var lines []string
	for _, m := range req.Messages {
		var texts []string
		for _, b := range m.Content {
			if b.Type == wire.BlockText {
				texts = append(texts, b.Text)
			}
		}
		lines = append(lines, m.Role+":"+strings.Join(texts, "+"))
	}
	*e.seen = append(*e.seen, strings.Join(lines, " "))
	return e.scriptEngine.Run(ctx, p, req, opts, sink)
}

// TestReplaceLastTurnAndAnswer: regenerate asks the last user
// message again without its old answer; edit-and-resend asks the new text
// without the old message or its answer; the replaced messages stay in
// the thread, marked replaced; both are refused on a thread
// without a message, and a regenerate with content or an unknown mode is
// invalid.
func TestReplaceLastTurnAndAnswer(t *testing.T) {
	ctx := context.Background()
	var seen []string
	svc, st, p, th := setup(t, recordEngine{seen: &seen})
	text := func(s string) []wire.ContentBlock {
		return []wire.ContentBlock{{Type: wire.BlockText, Text: s}}
	}
	run := func(tr TurnRequest) {
		t.Helper()
		turn, err := svc.StartTurn(ctx, p, th.ID(), tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Run(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Replace: ReplaceLastAnswer}); fault.KindOf(err) != fault.Conflict {
		t.Fatalf("regenerate in an empty thread: %v", err)
	}
	run(TurnRequest{Content: text("one")})
	run(TurnRequest{Content: text("two")})
	run(TurnRequest{Replace: ReplaceLastAnswer})
	run(TurnRequest{Replace: ReplaceLastTurn, Content: text("two, edited")})
	want := []string{
		"user:one",
		"user:one assistant:Running.+Done. user:two",
		"user:one assistant:Running.+Done. user:two", // regenerate: the old answer is not shown to the model
		"user:one assistant:Running.+Done. user:two, edited",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the model saw:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	describe := func(threadID string) string {
		ms, err := st.Messages(ctx, threadID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			var blocks []wire.ContentBlock
			_ = json.Unmarshal(m.Content(), &blocks)
			s := string(m.Role())
			if m.Role() == "user" {
				s += ":" + blocks[0].Text
			}
			if m.Replaced() {
				s += "(replaced)"
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	stored := "user:one assistant user:two(replaced) assistant(replaced) assistant(replaced) user:two, edited assistant"
	if got := describe(th.ID()); got != stored {
		t.Fatalf("stored:\n%s\nwant:\n%s", got, stored)
	}
	if _, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Replace: ReplaceLastAnswer, Content: text("x")}); fault.KindOf(err) != fault.Invalid {
		t.Errorf("regenerate with content: %v", err)
	}
	if _, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Replace: "first_turn", Content: text("x")}); fault.KindOf(err) != fault.Invalid {
		t.Errorf("an unknown replace: %v", err)
	}
}

// hookedStore is a memStore that calls onMessages (once) after it read a
// thread's messages, before it returns them.
type hookedStore struct {
	*memStore
	onMessages func()
}

func (h *hookedStore) Messages(ctx context.Context, threadID string) ([]thread.Message, error) {
	ms, err := h.memStore.Messages(ctx, threadID)
	if f := h.onMessages; f != nil {
		h.onMessages = nil
		f()
	}
	return ms, err
}

// TestTurnReadsHistoryHoldingItsThread: a turn holds its thread before it
// reads the history it asks and the messages it replaces, so a second
// regenerate started while the first reads is refused, and the thread
// keeps one answer to its last message instead of two in a row.
func TestTurnReadsHistoryHoldingItsThread(t *testing.T) {
	ctx := context.Background()
	var seen []string
	st := newMemStore()
	hooked := &hookedStore{memStore: st}
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	eng := recordEngine{seen: &seen}
	d := Deps{Containers: oneContainer{}, Policies: oneContainer{}, Container: &outputs{data: "\x89PNG\r\n\x1a\nv1"}, Blobs: &memBlobs{written: map[string]time.Time{}}}
	d.Turns = turns.New(turns.Deps{Engine: loop{eng}, Containers: oneContainer{}, Records: turnstest.NewRecords()})
	svc := New(hooked, st, d)
	th := projectThread(t, ctx, svc, p)
	run := func(tr TurnRequest) error {
		turn, err := svc.StartTurn(ctx, p, th.ID(), tr)
		if err != nil {
			return err
		}
		_, err = turn.Run(ctx, nil)
		return err
	}
	if err := run(TurnRequest{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "one"}}}); err != nil {
		t.Fatal(err)
	}
	var inner error
	hooked.onMessages = func() { inner = run(TurnRequest{Replace: ReplaceLastAnswer}) }
	if err := run(TurnRequest{Replace: ReplaceLastAnswer}); err != nil {
		t.Fatal(err)
	}
	if fault.KindOf(inner) != fault.Conflict {
		t.Errorf("a regenerate while another reads the thread: %v, want a conflict", inner)
	}
	ms, err := st.Messages(ctx, th.ID())
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, m := range ms {
		if !m.Replaced() {
			live = append(live, string(m.Role()))
		}
	}
	if got := strings.Join(live, " "); got != "user assistant" {
		t.Fatalf("the thread's history is %q, want %q", got, "user assistant")
	}
}
