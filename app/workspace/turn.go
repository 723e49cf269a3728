package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// DefaultMaxTokens caps each model step of a turn unless Deps say otherwise.
const DefaultMaxTokens = 4096

// BlockResource is the type of the content block that announces an artifact.
const BlockResource = "zylon-resource"

// BlockTiming is the type of the content block that tells how long a code
// execution ran: from the end of its call's input to its result, as the
// page's clock counts it. It follows the call's result (and its
// zylon-resource blocks), so a stored turn keeps its durations.
const BlockTiming = "zylon-timing"

// TurnRequest is the body of a chat turn.
type TurnRequest struct {
	Content []wire.ContentBlock // the user's content
	Skills  []string            // skill names or ids
	Tools   []AskedTool         // pgpt.tools
	Model   string              // "" means the default model
	Stream  bool
	// Replace makes the turn replace the thread's last one: ReplaceLastTurn
	// (edit-and-resend: Content replaces the last user message, which and
	// whose answer become earlier versions) or ReplaceLastAnswer
	// (regenerate: Content must be empty; the last user message is asked
	// again and its answer becomes an earlier version). "" appends a turn.
	Replace string
}

// The ways a turn may replace the last one (TurnRequest.Replace).
const (
	ReplaceLastTurn   = "last_turn"
	ReplaceLastAnswer = "last_answer"
)

// Turn is a chat turn that has been checked and is ready to run.
type Turn struct {
	s       *Service
	p       user.Principal
	thread  thread.Thread
	turn    *turns.Turn // the turn as app/turns prepared it
	content []wire.ContentBlock
	done    bool
	// replace are the ids of the messages the turn replaces, and reask
	// tells that the user message is the stored one asked again
	// (regenerate), so none is stored.
	replace []string
	reask   bool
}

// userBlocks are the block types a user turn may hold.
var userBlocks = map[string]bool{
	wire.BlockText: true, wire.BlockImage: true, wire.BlockDocument: true, wire.BlockContainerUpload: true,
}

// StartTurn checks a turn on one of the caller's threads and prepares it:
// the thread's history from the database and the tools after the injection
// rules make its request, which app/turns prepares as every turn (quotas,
// the thread's container, uploads, skills). Only one turn runs per thread
// at a time. The caller must Run (or Abort) the turn it gets.
func (s *Service) StartTurn(ctx context.Context, p user.Principal, threadID string, tr TurnRequest) (*Turn, error) {
	if s.d.Turns == nil || s.d.Policies == nil {
		return nil, fault.New(fault.Unavailable, "the chat pipeline is not configured")
	}
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return nil, err
	}
	// The thread is held before its history is read: a turn, a rewind or
	// a revert that ended meanwhile would otherwise leave this turn asking
	// the model a history the thread no longer has, and replacing messages
	// another turn already replaced.
	ok, err := s.holdThread(ctx, th.ID())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fault.New(fault.Conflict, "a turn is already running in this thread")
	}
	t, err := s.startTurn(ctx, p, th, tr)
	if err != nil {
		s.releaseThread(th.ID())
		return nil, err
	}
	return t, nil
}

// startTurn is StartTurn on a thread it holds.
func (s *Service) startTurn(ctx context.Context, p user.Principal, th thread.Thread, tr TurnRequest) (*Turn, error) {
	var (
		err     error
		history []wire.Message
		replace []string
		reask   bool
	)
	switch tr.Replace {
	case "":
		if history, err = s.history(ctx, th.ID()); err != nil {
			return nil, err
		}
	case ReplaceLastTurn, ReplaceLastAnswer:
		if history, replace, tr.Content, err = s.replaced(ctx, th.ID(), tr); err != nil {
			return nil, err
		}
		reask = tr.Replace == ReplaceLastAnswer
	default:
		return nil, fault.Errorf(fault.Invalid, "replace: must be %q or %q", ReplaceLastTurn, ReplaceLastAnswer)
	}
	if len(tr.Content) == 0 {
		return nil, fault.New(fault.Invalid, "content: required (a string or an array of content blocks)")
	}
	for i, b := range tr.Content {
		if !userBlocks[b.Type] {
			return nil, fault.Errorf(fault.Invalid, "content.%d.type: %q is not allowed in a user turn", i, b.Type)
		}
	}
	policy, err := s.d.Policies.OrgPolicy(ctx, p.OrgID)
	if err != nil {
		return nil, fmt.Errorf("workspace: policy: %w", err)
	}
	tools, _, err := TurnTools(tr.Tools, len(tr.Skills) > 0, policy)
	if err != nil {
		return nil, err
	}
	maxTokens := s.d.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	req := &wire.Request{
		Model: tr.Model, MaxTokens: maxTokens, Tools: tools, Stream: tr.Stream,
		Messages: append(history, wire.Message{Role: wire.RoleUser, Content: tr.Content}),
	}
	if len(tr.Skills) > 0 {
		// The chat names skills by name or version id, the latest version.
		req.Container = &wire.ContainerParam{}
		for _, name := range tr.Skills {
			req.Container.Skills = append(req.Container.Skills, wire.SkillParam{Type: "custom", SkillID: name})
		}
	}
	stores, err := storedBytes(tr.Content, reask)
	if err != nil {
		return nil, err
	}
	prepared, err := s.d.Turns.Prepare(ctx, p, req, &turns.Thread{ID: th.ID(), Stores: stores, History: len(history)})
	if err != nil {
		return nil, err
	}
	// A chat turn's log carries its commands' output as it is produced:
	// the chat shows it live, and a reattached page too.
	prepared.LiveOutput()
	return &Turn{s: s, p: p, thread: th, turn: prepared, content: tr.Content, replace: replace, reask: reask}, nil
}

// storedBytes is what a turn stores before it runs: its user message,
// unless it asks the stored one again.
func storedBytes(content []wire.ContentBlock, reask bool) (int64, error) {
	if reask {
		return 0, nil
	}
	raw, err := json.Marshal(content)
	if err != nil {
		return 0, fmt.Errorf("workspace: user content: %w", err)
	}
	return int64(len(raw)), nil
}

// turnLease names the lease a thread's turn runs under.
func turnLease(threadID string) string { return "turn:" + threadID }

// holdThread takes the thread for a turn or a rewind: in this process
// first (the database lease is this process's, whoever in it asks), then
// its turn lease across servers. ok is false when either is held already.
func (s *Service) holdThread(ctx context.Context, threadID string) (bool, error) {
	s.mu.Lock()
	if s.busy[threadID] {
		s.mu.Unlock()
		return false, nil
	}
	s.busy[threadID] = true
	s.mu.Unlock()
	ok, err := s.d.Leases.Acquire(ctx, turnLease(threadID))
	if err != nil || !ok {
		s.mu.Lock()
		delete(s.busy, threadID)
		s.mu.Unlock()
	}
	if err != nil {
		return false, fmt.Errorf("workspace: turn lease: %w", err)
	}
	return ok, nil
}

// holdFiles looks up one of the caller's threads and holds it, as a turn
// does, to change its container's files from its snapshots (a rewind, a
// revert); releaseThread gives it back. It is refused without snapshots or
// containers on this server, and with busy while the thread is held.
func (s *Service) holdFiles(ctx context.Context, p user.Principal, threadID, busy string) (thread.Thread, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return thread.Thread{}, err
	}
	if !s.snapshotsOn() || s.d.Containers == nil {
		return thread.Thread{}, fault.New(fault.Unavailable, "thread files snapshots are not available on this server")
	}
	ok, err := s.holdThread(ctx, th.ID())
	if err != nil {
		return thread.Thread{}, err
	}
	if !ok {
		return thread.Thread{}, fault.New(fault.Conflict, busy)
	}
	return th, nil
}

// releaseThread gives back what holdThread took.
func (s *Service) releaseThread(threadID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.d.Leases.Release(ctx, turnLease(threadID)); err != nil {
		s.log.Warn("turn lease not released", "thread", threadID, "cause", err.Error())
	}
	s.mu.Lock()
	delete(s.busy, threadID)
	s.mu.Unlock()
}

// Abort releases a turn that will not run.
func (t *Turn) Abort() {
	if !t.done {
		t.done = true
		t.s.releaseThread(t.thread.ID())
	}
}

// Thread returns the turn's thread.
func (t *Turn) Thread() thread.Thread { return t.thread }

// Run runs the turn, sending its events to sink as they happen (with one
// zylon-resource block after each tool result that produced an artifact),
// and stores it: the user message first, then the assistant message,
// written as incomplete and marked complete only when the turn has ended,
// so a crash mid-turn never leaves an assistant message that looks whole.
// On error the events sent so far are not followed by message_stop.
func (t *Turn) Run(ctx context.Context, sink messages.Sink) (*wire.Response, error) {
	defer t.Abort()
	return t.run(ctx, sink)
}

// run is Run without releasing the thread's turn lease.
func (t *Turn) run(ctx context.Context, sink messages.Sink) (*wire.Response, error) {
	if t.done {
		return nil, fault.New(fault.Conflict, "the turn has already run")
	}
	s := t.s
	// The turn's writes outlive a client that goes away mid-turn.
	dbctx := context.WithoutCancel(ctx)
	// The turn it replaces becomes an earlier version first, under the
	// thread's turn lease, so no other turn sees it half replaced.
	if err := s.store.ReplaceMessages(dbctx, t.thread.ID(), t.replace); err != nil {
		return nil, fmt.Errorf("workspace: replace the last turn: %w", err)
	}
	if !t.reask {
		userJSON, err := json.Marshal(t.content)
		if err != nil {
			return nil, fmt.Errorf("workspace: user content: %w", err)
		}
		um, err := thread.NewMessage(id.New("msg"), t.thread.ID(), thread.User, userJSON, true, s.now())
		if err != nil {
			return nil, err
		}
		if _, err := s.store.AppendMessage(dbctx, um); err != nil {
			return nil, fmt.Errorf("workspace: store user message: %w", err)
		}
	}
	// A thread still titled by default takes its title from its first
	// message, as chat apps propose one; the model may write a better one
	// once it answered (writeTitle).
	proposed := ""
	if th := t.thread.ProposeTitle(textOf(t.content), s.now()); th.Title() != t.thread.Title() {
		if err := s.store.UpdateThread(dbctx, th); err == nil {
			t.thread, proposed = th, th.Title()
		}
	}
	am, err := thread.NewMessage(id.New("msg"), t.thread.ID(), thread.Assistant, []byte("[]"), false, s.now())
	if err != nil {
		return nil, err
	}
	if am, err = s.store.AppendMessage(dbctx, am); err != nil {
		return nil, fmt.Errorf("workspace: store assistant message: %w", err)
	}
	rs := &resourceSink{out: sink, last: -1, now: s.now}
	// The files as each call left them, snapshotted while the model takes
	// its next step; the next call waits for that snapshot.
	snaps := s.turnSnapshots(dbctx, t.p, t.thread, am.ID())
	defer snaps.wait()
	t.turn.BeforeToolCall(func(context.Context, messages.ToolCall, *wire.ToolResult) { snaps.before() })
	t.turn.OnToolCall(func(hctx context.Context, call messages.ToolCall, _ *wire.ToolResult) {
		snaps.after(call.ID)
		took, timed := rs.took(call.ID)
		arts, deferred := s.capture(context.WithoutCancel(hctx), t.thread, call.ContainerID, call.ID)
		for _, a := range arts {
			rs.inject(resourceBlock(a))
		}
		if deferred > 0 {
			rs.inject(deferredNote(deferred, s.d.MaxArtifactsPerCall))
		}
		if timed {
			rs.inject(timingBlock(call.ID, took))
		}
		// Keep the partial turn, still incomplete, after each tool call.
		if content, err := json.Marshal(rs.col.Response().Content); err == nil {
			_ = s.store.UpdateMessage(dbctx, am.Progress(content))
		}
	})
	runErr := t.turn.Run(ctx, rs)
	if runErr == nil {
		runErr = rs.err
	}
	resp := rs.col.Response()
	if resp.Content == nil {
		resp.Content = []wire.ContentBlock{}
	}
	content, err := json.Marshal(resp.Content)
	if err != nil {
		return nil, fmt.Errorf("workspace: assistant content: %w", err)
	}
	if runErr != nil {
		// Keep what was produced, incomplete for good, and why.
		_ = s.store.UpdateMessage(dbctx, am.Interrupt(content, ending(ctx, runErr)))
		return nil, runErr
	}
	usage, _ := json.Marshal(resp.Usage)
	if err := s.store.UpdateMessage(dbctx, am.Finish(content, usage)); err != nil {
		return nil, fmt.Errorf("workspace: finish assistant message: %w", err)
	}
	_ = s.store.UpdateThread(dbctx, t.thread.Touch(s.now()))
	if proposed != "" {
		t.writeTitle(ctx, proposed, textOf(t.content), textOf(resp.Content))
	}
	// The files as the turn left them, under its lease, so no rewind or
	// other turn of the thread changes them meanwhile.
	s.snapshotTurn(dbctx, t.p, t.thread, am.ID(), snaps.baseID())
	return resp, nil
}

// titleTimeout bounds the request for a thread's title.
const titleTimeout = 20 * time.Second

// titleExcerpt bounds each side of the exchange a title is asked from,
// in bytes.
const titleExcerpt = 2000

// writeTitle asks the model for the title of a thread whose first
// exchange just ended (asked and answer its text), in one small request,
// and keeps it when the thread still has the title proposed from the
// first line; when the request fails that title stays. It runs before the
// turn ends, so the page that reads the thread then sees the title. A
// stop of the turn (ctx) cuts the request short: the proposed title stays.
func (t *Turn) writeTitle(ctx context.Context, proposed, asked, answer string) {
	s := t.s
	if s.d.Titles == nil {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, titleTimeout)
	defer cancel()
	exchange := "User: " + excerpt(asked, titleExcerpt) + "\n\nAssistant: " + excerpt(answer, titleExcerpt)
	written, err := s.d.Titles.Title(tctx, t.p, t.turn.Model(), exchange)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("thread title not written", "thread", t.thread.ID(), "cause", err.Error())
		}
		return
	}
	ctx = context.WithoutCancel(ctx)
	th, err := s.store.Thread(ctx, t.p.OrgID, t.p.UserID, t.thread.ID())
	if err != nil {
		return
	}
	if next := th.WriteTitle(proposed, written, s.now()); next.Title() != th.Title() {
		if err := s.store.UpdateThread(ctx, next); err == nil {
			t.thread = next
		}
	}
}

// excerpt returns text cut to at most n bytes at a rune boundary.
func excerpt(text string, n int) string {
	text = strings.TrimSpace(text)
	if len(text) <= n {
		return text
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return text[:n] + "…"
}

// history returns the thread's messages as the model's conversation,
// zylon-resource blocks left out. An incomplete assistant message (its turn
// was stopped, interrupted or failed: history is read under the thread's
// turn lease, so no turn of it runs) keeps its place, so the request before
// it is never merged into the next one nor run again: what it produced is
// kept, a call that never got its result becomes a note, and a last note
// tells the model that the turn was interrupted.
func (s *Service) history(ctx context.Context, threadID string) ([]wire.Message, error) {
	stored, err := s.store.Messages(ctx, threadID)
	if err != nil {
		return nil, err
	}
	return modelHistory(stored)
}

// modelHistory is history's conversion of stored messages; replaced ones
// are left out.
func modelHistory(stored []thread.Message) ([]wire.Message, error) {
	var out []wire.Message
	for _, m := range stored {
		if m.Replaced() {
			continue
		}
		var blocks []wire.ContentBlock
		if err := json.Unmarshal(m.Content(), &blocks); err != nil {
			return nil, fmt.Errorf("workspace: stored message %s: %w", m.ID(), err)
		}
		kept := blocks[:0]
		for _, b := range blocks {
			if b.Type != BlockResource && b.Type != BlockTiming {
				kept = append(kept, b)
			}
		}
		if !m.Complete() && m.Role() == thread.Assistant {
			kept = append(interrupted(kept), wire.ContentBlock{Type: wire.BlockText, Text: InterruptedNote(m.Ended())})
		}
		if len(kept) == 0 {
			continue
		}
		out = append(out, wire.Message{Role: string(m.Role()), Content: kept})
	}
	return out, nil
}

// replaced returns, for a turn that replaces the thread's last one (tr.Replace),
// the history before it, the ids of the messages it replaces, and the
// user content it asks: tr.Content for an edit, the stored last user
// message for a regenerate.
func (s *Service) replaced(ctx context.Context, threadID string, tr TurnRequest) ([]wire.Message, []string, []wire.ContentBlock, error) {
	stored, err := s.store.Messages(ctx, threadID)
	if err != nil {
		return nil, nil, nil, err
	}
	var live []thread.Message
	for _, m := range stored {
		if !m.Replaced() {
			live = append(live, m)
		}
	}
	last := -1
	for i := len(live) - 1; i >= 0; i-- {
		if live[i].Role() == thread.User {
			last = i
			break
		}
	}
	if last < 0 {
		return nil, nil, nil, fault.New(fault.Conflict, "replace: the thread has no message to edit or answer again")
	}
	cut := last // an edit replaces the user message and its answer
	if tr.Replace == ReplaceLastAnswer {
		if len(tr.Content) > 0 {
			return nil, nil, nil, fault.New(fault.Invalid, "content: must be empty with replace \"last_answer\" (the last user message is asked again)")
		}
		if err := json.Unmarshal(live[last].Content(), &tr.Content); err != nil {
			return nil, nil, nil, fmt.Errorf("workspace: stored message %s: %w", live[last].ID(), err)
		}
		cut = last + 1 // a regenerate keeps the user message
	}
	var ids []string
	for _, m := range live[cut:] {
		ids = append(ids, m.ID())
	}
	history, err := modelHistory(live[:cut])
	if err != nil {
		return nil, nil, nil, err
	}
	if tr.Replace == ReplaceLastAnswer {
		// The user message is the history's last; the turn asks it again.
		history = history[:len(history)-1]
	}
	return history, ids, tr.Content, nil
}

// InterruptedNote ends an interrupted turn in the history the model reads:
// what ended it, and that nothing of it runs again unless asked anew.
func InterruptedNote(why thread.Ending) string {
	const rest = ": the request before it was not completed, and nothing of it runs again unless asked anew.]"
	switch why.Reason {
	case thread.Stopped:
		return "[This answer was stopped by the user before it finished" + rest
	case thread.Failed:
		return "[This answer failed before it finished (" + why.Detail + ")" + rest
	}
	return "[This answer was interrupted before it finished (the server ended the turn)" + rest
}

// ending says why a turn ended with err: stopped when its context ended
// (the client stopped it or went away), else failed, with the error as the
// client is told it.
func ending(ctx context.Context, err error) thread.Ending {
	if errors.Is(context.Cause(ctx), turns.ErrServerStopping) {
		return thread.Ending{}
	}
	if ctx.Err() != nil {
		return thread.Ending{Reason: thread.Stopped}
	}
	return thread.Ending{Reason: thread.Failed, Detail: fault.MessageOf(messages.Fault(err))}
}

// interrupted replaces each server call of an interrupted turn that never
// got its result with a note naming it, so the history stays valid.
func interrupted(blocks []wire.ContentBlock) []wire.ContentBlock {
	answered := map[string]bool{}
	for _, b := range blocks {
		if b.ToolUseID != "" {
			answered[b.ToolUseID] = true
		}
	}
	out := blocks[:0:0]
	for _, b := range blocks {
		if b.Type == wire.BlockServerToolUse && !answered[b.ID] {
			out = append(out, wire.ContentBlock{Type: wire.BlockText, Text: fmt.Sprintf("[The call %s with input %s was interrupted before it ended; its result is unknown.]", b.Name, string(b.Input))})
			continue
		}
		out = append(out, b)
	}
	return out
}

// Messages returns one of the caller's threads' stored messages in order.
//
// running tells whether a turn of the thread runs now (on any server): an
// incomplete assistant message is then that turn's; otherwise its turn
// failed (the server stopped or died mid-turn, or the turn ended in an
// error) and it stays incomplete for good.
func (s *Service) Messages(ctx context.Context, p user.Principal, threadID string) (msgs []thread.Message, running bool, err error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return nil, false, err
	}
	if msgs, err = s.store.Messages(ctx, th.ID()); err != nil {
		return nil, false, err
	}
	if running, err = s.turnHeld(th.ID())(ctx); err != nil {
		return nil, false, err
	}
	return msgs, running, nil
}

// policyAllows reports whether the org's policy allows f.
func (s *Service) policyAllows(ctx context.Context, orgID string, f org.Feature) error {
	if s.d.Policies == nil {
		return fault.New(fault.Unavailable, "policies are not configured")
	}
	pol, err := s.d.Policies.OrgPolicy(ctx, orgID)
	if err != nil {
		return fmt.Errorf("workspace: policy: %w", err)
	}
	if !pol.Allows(f) {
		return org.Refusal(f)
	}
	return nil
}

// resourceSink passes a turn's events on, shifting block indexes to make
// room for the zylon-resource blocks it injects, and collects the response.
type resourceSink struct {
	out   messages.Sink
	col   messages.Collector
	shift int
	last  int // highest block index sent
	err   error
	// now tells the time; calls are the server tool calls by block index
	// (as received) until their input is complete, ready when they became
	// complete by call id.
	now   func() time.Time
	mu    sync.Mutex
	calls map[int]string
	ready map[string]time.Time
}

// timingBlock is the zylon-timing block of the call id that ran took.
func timingBlock(id string, took time.Duration) wire.ContentBlock {
	raw, _ := json.Marshal(struct {
		Type       string `json:"type"`
		ToolUseID  string `json:"tool_use_id"`
		DurationMS int64  `json:"duration_ms"`
	}{BlockTiming, id, took.Milliseconds()})
	return wire.ContentBlock{Type: BlockTiming, Raw: raw}
}

// took returns how long the server tool call id ran since its input was
// complete; false for a call the stream did not show (a call from code).
func (r *resourceSink) took(id string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.ready[id]
	if !ok || r.now == nil {
		return 0, false
	}
	delete(r.ready, id)
	return r.now().Sub(at), true
}

// watch notes when each server tool call's input is complete.
func (r *resourceSink) watch(ev wire.Event) {
	if r.now == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev.Type {
	case wire.EventContentBlockStart:
		if b := ev.ContentBlock; b != nil && b.Type == wire.BlockServerToolUse && b.ID != "" {
			if r.calls == nil {
				r.calls, r.ready = map[int]string{}, map[string]time.Time{}
			}
			r.calls[ev.Index] = b.ID
		}
	case wire.EventContentBlockStop:
		if id, ok := r.calls[ev.Index]; ok {
			delete(r.calls, ev.Index)
			r.ready[id] = r.now()
		}
	}
}

func (r *resourceSink) Send(ev wire.Event) error {
	if r.err != nil {
		return r.err
	}
	r.watch(ev)
	switch ev.Type {
	case wire.EventContentBlockStart, wire.EventContentBlockDelta, wire.EventContentBlockStop:
		ev.Index += r.shift
		r.last = max(r.last, ev.Index)
	}
	if b := ev.ContentBlock; b != nil && b.Caller != nil && !b.FromCode() {
		// The Messages API tells its clients a call the model made itself
		// (caller direct); a chat turn's stream, its log and its stored
		// message leave that out, so a replay is what the stream sent.
		c := *b
		c.Caller = nil
		ev.ContentBlock = &c
	}
	if err := r.col.Send(ev); err != nil {
		return err
	}
	if r.out == nil {
		return nil
	}
	if err := r.out.Send(ev); err != nil {
		r.err = err
		return err
	}
	return nil
}

// inject sends a complete block right after the last one. The loop calls
// its tool hook once the result block is closed and before any later block
// starts, so no block is open here.
func (r *resourceSink) inject(b wire.ContentBlock) {
	idx := r.last + 1
	r.shift++
	for _, ev := range []wire.Event{
		{Type: wire.EventContentBlockStart, Index: idx, ContentBlock: &b},
		{Type: wire.EventContentBlockStop, Index: idx},
	} {
		_ = r.col.Send(ev)
		if r.out != nil && r.err == nil {
			if err := r.out.Send(ev); err != nil {
				r.err = err
			}
		}
	}
	r.last = idx
}

// textOf joins the text blocks of a message.
func textOf(blocks []wire.ContentBlock) string {
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == wire.BlockText {
			b.WriteString(bl.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}
