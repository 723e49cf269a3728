package workspace

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"

	"threadbox/domain/fault"
	"threadbox/domain/snapshot"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// What each tool call changed: a turn snapshots the thread's files at the
// end of each of its sandbox tool calls, besides its end, and once before
// its first call when they differ from the thread's newest snapshot (an
// upload, a terminal, a rewind changed them). A call's changes are the
// difference between the snapshot before it (its BaseID) and its own,
// computed when asked. The snapshots are taken in the background while
// the model takes its next step; the next call, and the turn's end, wait
// for them, so no call's changes mix with another's.

// unknownBase is a call snapshot's BaseID when the files before the call
// could not be snapshotted: its changes cannot be told.
const unknownBase = "unknown"

// turnSnaps takes one turn's start and call snapshots one after another
// in the background.
type turnSnaps struct {
	s         *Service
	ctx       context.Context
	p         user.Principal
	th        thread.Thread
	messageID string

	mu      sync.Mutex
	done    chan struct{} // closed when the last job ended
	started bool
	base    string // the snapshot holding the files now, set by the jobs
}

// turnSnapshots starts the snapshots of a turn; without snapshots
// configured it takes none.
func (s *Service) turnSnapshots(ctx context.Context, p user.Principal, th thread.Thread, messageID string) *turnSnaps {
	return &turnSnaps{s: s, ctx: ctx, p: p, th: th, messageID: messageID}
}

// queue runs job after the jobs queued before it, in the background.
func (tt *turnSnaps) queue(job func()) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	prev, done := tt.done, make(chan struct{})
	tt.done = done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		job()
	}()
}

// wait returns when every queued job ended; base is then the snapshot
// holding the files.
func (tt *turnSnaps) wait() {
	tt.mu.Lock()
	done := tt.done
	tt.mu.Unlock()
	if done != nil {
		<-done
	}
}

// before runs before each sandbox tool call: the first one queues the
// turn's start snapshot, and every call waits for the snapshots queued
// before it, so the files it finds are those its base holds.
func (tt *turnSnaps) before() {
	if !tt.s.snapshotsOn() {
		return
	}
	tt.mu.Lock()
	first := !tt.started
	tt.started = true
	tt.mu.Unlock()
	if first {
		tt.queue(func() {
			sn, _, err := tt.s.takeSnapshot(tt.ctx, tt.p, tt.th, snapshot.Snapshot{Kind: snapshot.KindStart, MessageID: tt.messageID})
			if err != nil {
				tt.s.log.Warn("files snapshot before the turn's first call not taken", "thread", tt.th.ID(), "cause", err.Error())
				tt.base = unknownBase
				return
			}
			tt.base = sn.ID
		})
	}
	tt.wait()
}

// after queues the snapshot of the sandbox tool call callID's end.
func (tt *turnSnaps) after(callID string) {
	if !tt.s.snapshotsOn() {
		return
	}
	tt.queue(func() {
		sn, _, err := tt.s.takeSnapshot(tt.ctx, tt.p, tt.th, snapshot.Snapshot{Kind: snapshot.KindCall, MessageID: tt.messageID, CallID: callID, BaseID: tt.base})
		if err != nil {
			tt.s.log.Warn("files snapshot of a call not taken", "thread", tt.th.ID(), "call", callID, "cause", err.Error())
			tt.base = unknownBase
			return
		}
		tt.base = sn.ID
	})
}

// baseID returns the snapshot holding the files after the turn's calls
// ("" when the turn made none, or a failed snapshot left it unknown).
func (tt *turnSnaps) baseID() string {
	tt.wait()
	if tt.base == unknownBase {
		return ""
	}
	return tt.base
}

// Bounds of a call's change list with diffs.
const (
	// diffFileMax is the largest file whose text diff is made.
	diffFileMax = 512 << 10
	// diffTotalMax bounds the diffs of one call together; the files past
	// it are listed without their diff.
	diffTotalMax = 2 << 20
)

// FileChange is one path a tool call changed.
type FileChange struct {
	Path        string // under the container's folders: "workspace/a.txt"
	Op          string // snapshot.Created, Changed or Deleted
	Before      *snapshot.File
	After       *snapshot.File
	Text        bool   // both sides are text (UTF-8 without NUL bytes)
	Diff        string // a unified diff of a text file, when asked and within the bounds
	DiffOmitted string // why a text or other file has no diff
}

// CallChanges is what one sandbox tool call changed.
type CallChanges struct {
	CallID     string
	MessageID  string
	SnapshotID string // the snapshot of the call's end
	BaseID     string // the snapshot before it ("" for an empty container)
	Changes    []FileChange
}

// callSnapshot finds the snapshot of callID's end among snaps, by index.
func callSnapshot(snaps []snapshot.Snapshot, callID string) (int, error) {
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Kind == snapshot.KindCall && snaps[i].CallID == callID {
			return i, nil
		}
	}
	return 0, fault.Errorf(fault.NotFound, "no files snapshot of the tool call %s is kept (not a sandbox call of this thread, one that ran before snapshots were taken per call, or one past the org's snapshot retention)", callID)
}

// ThreadChanges lists, for each sandbox tool call of one of the caller's
// threads whose snapshots are kept, the paths it created, changed and
// deleted, without diffs; a call whose files before it are not kept is
// left out.
func (s *Service) ThreadChanges(ctx context.Context, p user.Principal, threadID string) ([]CallChanges, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return nil, err
	}
	if !s.snapshotsOn() {
		return []CallChanges{}, nil
	}
	snaps, err := s.d.Snapshots.Records.ThreadSnapshots(ctx, th.ID())
	if err != nil {
		return nil, err
	}
	manifest := s.manifests(ctx, th.ID())
	out := []CallChanges{}
	for _, sn := range snaps {
		if sn.Kind != snapshot.KindCall {
			continue
		}
		cc, err := s.callChanges(ctx, th.ID(), sn, snaps, manifest)
		if fault.Is(err, fault.Conflict) || fault.Is(err, fault.NotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, cc)
	}
	return out, nil
}

// manifests returns a reader of the manifests of a thread's snapshots that
// reads each one once.
func (s *Service) manifests(ctx context.Context, threadID string) func(id string) (map[string]snapshot.File, error) {
	read := map[string]map[string]snapshot.File{}
	return func(id string) (map[string]snapshot.File, error) {
		if m, ok := read[id]; ok {
			return m, nil
		}
		m, err := s.d.Snapshots.Files.SnapshotManifest(ctx, threadID, id)
		if err == nil {
			read[id] = m
		}
		return m, err
	}
}

// oneCall finds the sandbox tool call callID among the thread's kept
// snapshots and what it changed: the snapshots, the call's index among
// them, and its changes.
func (s *Service) oneCall(ctx context.Context, threadID, callID string, manifest func(string) (map[string]snapshot.File, error)) ([]snapshot.Snapshot, int, CallChanges, error) {
	snaps, err := s.d.Snapshots.Records.ThreadSnapshots(ctx, threadID)
	if err != nil {
		return nil, 0, CallChanges{}, err
	}
	i, err := callSnapshot(snaps, callID)
	if err != nil {
		return nil, 0, CallChanges{}, err
	}
	cc, err := s.callChanges(ctx, threadID, snaps[i], snaps, manifest)
	return snaps, i, cc, err
}

// callChanges lists what the call whose snapshot is sn changed.
func (s *Service) callChanges(ctx context.Context, threadID string, sn snapshot.Snapshot, snaps []snapshot.Snapshot, manifest func(string) (map[string]snapshot.File, error)) (CallChanges, error) {
	if sn.BaseID == unknownBase {
		return CallChanges{}, fault.Errorf(fault.Conflict, "the files before the tool call %s were not snapshotted: its changes are unknown", sn.CallID)
	}
	if sn.BaseID != "" && !kept(snaps, sn.BaseID) {
		return CallChanges{}, fault.Errorf(fault.Conflict, "the files before the tool call %s are no longer kept (past the org's snapshot retention)", sn.CallID)
	}
	before, err := manifest(sn.BaseID)
	if err != nil {
		return CallChanges{}, err
	}
	after, err := manifest(sn.ID)
	if err != nil {
		return CallChanges{}, err
	}
	cc := CallChanges{CallID: sn.CallID, MessageID: sn.MessageID, SnapshotID: sn.ID, BaseID: sn.BaseID, Changes: []FileChange{}}
	for _, c := range snapshot.Diff(before, after) {
		cc.Changes = append(cc.Changes, FileChange{Path: c.Path, Op: c.Op, Before: c.Before, After: c.After})
	}
	return cc, nil
}

// kept tells whether the snapshot id is among snaps.
func kept(snaps []snapshot.Snapshot, id string) bool {
	for _, sn := range snaps {
		if sn.ID == id {
			return true
		}
	}
	return false
}

// ToolCallChanges returns what one sandbox tool call of one of the
// caller's threads changed, with a unified diff of each text file (within
// diffFileMax each and diffTotalMax together; others by their sizes).
func (s *Service) ToolCallChanges(ctx context.Context, p user.Principal, threadID, callID string) (CallChanges, error) {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return CallChanges{}, err
	}
	if !s.snapshotsOn() {
		return CallChanges{}, fault.New(fault.Unavailable, "thread files snapshots are not available on this server")
	}
	_, _, cc, err := s.oneCall(ctx, th.ID(), callID, s.manifests(ctx, th.ID()))
	if err != nil {
		return CallChanges{}, err
	}
	total := 0
	for k := range cc.Changes {
		c := &cc.Changes[k]
		if (c.Before != nil && c.Before.Link != "") || (c.After != nil && c.After.Link != "") {
			c.DiffOmitted = "a symbolic link"
			continue
		}
		if (c.Before != nil && c.Before.Size > diffFileMax) || (c.After != nil && c.After.Size > diffFileMax) {
			c.DiffOmitted = fmt.Sprintf("larger than %d KiB", diffFileMax>>10)
			continue
		}
		var old, new []byte
		if c.Before != nil {
			if old, _, err = s.d.Snapshots.Files.SnapshotFile(ctx, th.ID(), cc.BaseID, c.Path, diffFileMax); err != nil {
				return CallChanges{}, err
			}
		}
		if c.After != nil {
			if new, _, err = s.d.Snapshots.Files.SnapshotFile(ctx, th.ID(), cc.SnapshotID, c.Path, diffFileMax); err != nil {
				return CallChanges{}, err
			}
		}
		if !isText(old) || !isText(new) {
			c.DiffOmitted = "not text"
			continue
		}
		c.Text = true
		d, err := udiff.ToUnified("a/"+c.Path, "b/"+c.Path, string(old), udiff.Lines(string(old), string(new)), udiff.DefaultContextLines)
		if err != nil {
			return CallChanges{}, fmt.Errorf("workspace: diff %s: %w", c.Path, err)
		}
		if total+len(d) > diffTotalMax {
			c.DiffOmitted = fmt.Sprintf("the call's diffs pass %d MiB", diffTotalMax>>20)
			continue
		}
		total += len(d)
		c.Diff = d
	}
	return cc, nil
}

// isText tells whether b reads as text: UTF-8 without NUL bytes.
func isText(b []byte) bool {
	return utf8.Valid(b) && !strings.ContainsRune(string(b), 0)
}

// Reverted is what reverting a call's changes did.
type Reverted struct {
	CallID   string
	Restored []string // the paths given back as they were before the call
	Forced   []string // those of them changed since the call, overwritten
}

// RevertToolCall gives back, in one of the caller's threads' container,
// the files the sandbox tool call callID changed, as they were before it:
// changed and deleted files restored, created ones removed; nothing else
// changes. When a later call (or anything else since) changed one of
// those paths, it is refused (fault.Conflict naming them) unless force.
// Refused while a turn of the thread runs, and when the files it gives
// back would take the org past its storage quota; audited.
func (s *Service) RevertToolCall(ctx context.Context, p user.Principal, threadID, callID string, force bool) (Reverted, error) {
	th, err := s.holdFiles(ctx, p, threadID, "a turn is running in this thread (or a rewind or revert): stop it or wait for it to end, then revert")
	if err != nil {
		return Reverted{}, err
	}
	hold := &threadHold{s: s, id: th.ID()}
	defer hold.release()
	manifest := s.manifests(ctx, th.ID())
	snaps, i, cc, err := s.oneCall(ctx, th.ID(), callID, manifest)
	if err != nil {
		return Reverted{}, err
	}
	var changes []snapshot.Change
	var paths []string
	for _, c := range cc.Changes {
		changes = append(changes, snapshot.Change{Path: c.Path, Op: c.Op, Before: c.Before, After: c.After})
		paths = append(paths, c.Path)
	}
	out := Reverted{CallID: callID, Restored: []string{}, Forced: []string{}}
	if len(paths) == 0 {
		return out, s.audit(ctx, p, "thread.call_revert", th.ID(), nil, map[string]any{"call_id": callID, "restored": 0})
	}
	// Who changed the paths since: the later snapshots, then the files as
	// they are now.
	touched := map[string]string{}
	for _, later := range snaps[i+1:] {
		m, err := manifest(later.ID)
		if err != nil {
			continue // gone meanwhile
		}
		by := "after it"
		if later.Kind == snapshot.KindCall {
			by = "by the later call " + later.CallID
		}
		for _, path := range snapshot.Touched(changes, m) {
			if _, ok := touched[path]; !ok {
				touched[path] = by
			}
		}
	}
	c, err := s.d.Containers.Scope(ctx, p, th.ID(), true)
	if err != nil {
		return Reverted{}, err
	}
	now, err := s.d.Snapshots.Files.ContainerFiles(ctx, c.ID(), paths)
	if err != nil {
		return Reverted{}, err
	}
	for _, path := range snapshot.Touched(changes, now) {
		if _, ok := touched[path]; !ok {
			touched[path] = "since"
		}
	}
	if len(touched) > 0 && !force {
		var say []string
		for _, path := range paths {
			if by, ok := touched[path]; ok {
				say = append(say, path+" (changed "+by+")")
			}
		}
		return Reverted{}, fault.Errorf(fault.Conflict, "the tool call's files were changed after it: %s; reverting would lose those changes: send force: true to revert anyway", strings.Join(say, ", "))
	}
	if err := s.restoreFits(ctx, th.OrgID(), th.ID(), cc.BaseID, c.ID(), paths); err != nil {
		return Reverted{}, err
	}
	// From the restore on, the revert outlives a client that goes away,
	// and a failed audit after it is retried (finishRestore): files
	// reverted without their audit event would go unrecorded.
	ctx = context.WithoutCancel(ctx)
	if err := s.d.Snapshots.Files.RestorePaths(ctx, th.ID(), cc.BaseID, c.ID(), paths); err != nil {
		return Reverted{}, fmt.Errorf("workspace: revert a call: %w", err)
	}
	s.mu.Lock()
	delete(s.seen, th.ID()) // outputs found again are announced as they change
	s.mu.Unlock()
	out.Restored = paths
	for _, path := range paths {
		if _, ok := touched[path]; ok {
			out.Forced = append(out.Forced, path)
		}
	}
	e := s.auditEvent(p, "thread.call_revert", th.ID(), nil, map[string]any{"call_id": callID, "restored": len(paths), "forced": len(out.Forced)})
	if err := s.finishRestore(ctx, hold, "revert", s.auditStep(e)); err != nil {
		return Reverted{}, err
	}
	return out, nil
}
