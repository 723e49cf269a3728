package workspace

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"threadbox/domain/audit"
	"threadbox/domain/fault"
	"threadbox/domain/snapshot"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// TestTurnAt: a rewind or a fork goes back to an assistant message of the
// thread's history; a user message, an earlier version or another
// thread's message is refused with its own kind.
func TestTurnAt(t *testing.T) {
	at := time.Unix(0, 0)
	msg := func(id string, role thread.Role, replaced bool) thread.Message {
		return thread.RestoreMessage(id, "thr_a", 0, role, []byte("[]"), nil, true, at, thread.Ending{}).WithReplaced(replaced)
	}
	msgs := []thread.Message{
		msg("u1", thread.User, false), msg("a1", thread.Assistant, false),
		msg("u2", thread.User, true), msg("a2", thread.Assistant, true),
		msg("u3", thread.User, false), msg("a3", thread.Assistant, false),
	}
	for _, tc := range []struct {
		id   string
		want int
		kind fault.Kind
	}{
		{"a1", 1, ""},
		{"a3", 5, ""},
		{"", 0, fault.Invalid},
		{"u1", 0, fault.Invalid},
		{"a2", 0, fault.Conflict},
		{"other", 0, fault.NotFound},
	} {
		got, err := turnAt(msgs, tc.id)
		if tc.kind != "" {
			if !fault.Is(err, tc.kind) {
				t.Errorf("turnAt(%q) err = %v, want %s", tc.id, err, tc.kind)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("turnAt(%q) = %d, %v, want %d", tc.id, got, err, tc.want)
		}
	}
}

// oneSnapshot keeps one turn snapshot for every assistant message.
type oneSnapshot struct{ SnapshotRecords }

func (oneSnapshot) MessageSnapshot(_ context.Context, threadID, messageID string) (snapshot.Snapshot, error) {
	return snapshot.Snapshot{ID: "snp_" + messageID, ThreadID: threadID, MessageID: messageID, Kind: snapshot.KindTurn, Files: 1}, nil
}

// restoreFiles restores a snapshot by calling restored.
type restoreFiles struct {
	SnapshotFiles
	restored func()
}

func (f restoreFiles) RestoreSnapshot(context.Context, string, string, string) error {
	f.restored()
	return nil
}

// ctxStore is a memStore whose message writes fail once their context
// ended, as the database's do.
type ctxStore struct{ *memStore }

func (c ctxStore) ReplaceMessages(ctx context.Context, threadID string, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.memStore.ReplaceMessages(ctx, threadID, ids)
}

// twoTurns appends the history u1 a1 u2 a2 (two user messages, each
// answered) to thread threadID.
func twoTurns(t *testing.T, ctx context.Context, st *memStore, threadID string) {
	t.Helper()
	for _, m := range []struct {
		id   string
		role thread.Role
	}{{"u1", thread.User}, {"a1", thread.Assistant}, {"u2", thread.User}, {"a2", thread.Assistant}} {
		msg, err := thread.NewMessage(m.id, threadID, m.role, []byte("[]"), true, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// foldedIDs returns the ids of thread threadID's folded messages, in
// order, joined by spaces.
func foldedIDs(t *testing.T, st *memStore, threadID string) string {
	t.Helper()
	ms, err := st.Messages(context.Background(), threadID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		if m.Replaced() {
			ids = append(ids, m.ID())
		}
	}
	return strings.Join(ids, " ")
}

// TestRewindOutlivesItsClient: a rewind whose client goes away once the
// files are restored still folds the history after the turn, so the
// thread's files and history agree.
func TestRewindOutlivesItsClient(t *testing.T) {
	st := newMemStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	svc := New(ctxStore{st}, st, Deps{Containers: oneContainer{}, Snapshots: Snapshots{Records: oneSnapshot{}, Files: restoreFiles{restored: cancel}}})
	th := projectThread(t, ctx, svc, p)
	twoTurns(t, ctx, st, th.ID())
	if _, err := svc.RewindThread(ctx, p, th.ID(), "a1"); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if got := foldedIDs(t, st, th.ID()); got != "u2 a2" {
		t.Fatalf("folded %q after the files were restored, want %q", got, "u2 a2")
	}
}

// callSnapshots keeps one call snapshot, of call c1, on the empty one.
type callSnapshots struct{ SnapshotRecords }

func (callSnapshots) ThreadSnapshots(_ context.Context, threadID string) ([]snapshot.Snapshot, error) {
	return []snapshot.Snapshot{{ID: "snp_c1", ThreadID: threadID, Kind: snapshot.KindCall, CallID: "c1", MessageID: "a1", Files: 1}}, nil
}

// createdFile is the snapshot files of call c1, which created
// workspace/a.txt, as the container still holds it.
type createdFile struct {
	restoreFiles
}

var aTxt = map[string]snapshot.File{"workspace/a.txt": {Size: 1, Mode: 0o644, SHA256: "a"}}

func (createdFile) SnapshotManifest(_ context.Context, _, snapshotID string) (map[string]snapshot.File, error) {
	if snapshotID == "" {
		return map[string]snapshot.File{}, nil
	}
	return aTxt, nil
}

func (createdFile) ContainerFiles(context.Context, string, []string) (map[string]snapshot.File, error) {
	return aTxt, nil
}

func (f createdFile) RestorePaths(context.Context, string, string, string, []string) error {
	f.restored()
	return nil
}

// ctxAudit keeps the events appended with a live context, as the
// database does.
type ctxAudit struct{ actions []string }

func (a *ctxAudit) AppendEvent(ctx context.Context, e audit.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a.actions = append(a.actions, e.Action)
	return nil
}

// TestRevertOutlivesItsClient: a revert whose client goes away once the
// files are restored is still recorded in the audit log.
func TestRevertOutlivesItsClient(t *testing.T) {
	st := newMemStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	log := &ctxAudit{}
	svc := New(st, st, Deps{Containers: oneContainer{}, Audit: log,
		Snapshots: Snapshots{Records: callSnapshots{}, Files: createdFile{restoreFiles{restored: cancel}}}})
	th := projectThread(t, ctx, svc, p)
	r, err := svc.RevertToolCall(ctx, p, th.ID(), "c1", false)
	if err != nil {
		t.Fatalf("revert: %v", err)
	}
	if got := strings.Join(r.Restored, " "); got != "workspace/a.txt" {
		t.Fatalf("restored %q, want workspace/a.txt", got)
	}
	if got := strings.Join(log.actions, " "); got != "thread.call_revert" {
		t.Fatalf("audited %q, want thread.call_revert", got)
	}
}

// growingFiles restores a snapshot that adds grow bytes to the
// container's files, and counts its restores.
type growingFiles struct {
	createdFile
	grow     int64
	restores *int
}

func (f growingFiles) RestoreGrowth(context.Context, string, string, string, []string) (int64, error) {
	return f.grow, nil
}

func (f growingFiles) RestoreSnapshot(context.Context, string, string, string) error {
	*f.restores++
	return nil
}

func (f growingFiles) RestorePaths(context.Context, string, string, string, []string) error {
	*f.restores++
	return nil
}

// timeTravelRig is a thread of two turns, u1 a1 u2 a2, whose turns and
// tool call c1 have snapshots growing the container's files by grow
// bytes, under an org whose storage quota refuses every byte more.
func timeTravelRig(t *testing.T, grow int64) (*Service, *memStore, user.Principal, string, *fakeQuota, *int) {
	t.Helper()
	ctx := context.Background()
	st := newMemStore()
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	q, restores := &fakeQuota{refuseStore: true}, new(int)
	svc := New(st, st, Deps{Containers: oneContainer{}, Quota: q,
		Snapshots: Snapshots{Records: snapshotsOf{}, Files: growingFiles{grow: grow, restores: restores}}})
	th := projectThread(t, ctx, svc, p)
	twoTurns(t, ctx, st, th.ID())
	return svc, st, p, th.ID(), q, restores
}

// snapshotsOf keeps a turn snapshot for every assistant message and one
// call snapshot, of call c1.
type snapshotsOf struct{ SnapshotRecords }

func (snapshotsOf) MessageSnapshot(ctx context.Context, threadID, messageID string) (snapshot.Snapshot, error) {
	return oneSnapshot{}.MessageSnapshot(ctx, threadID, messageID)
}

func (snapshotsOf) ThreadSnapshots(ctx context.Context, threadID string) ([]snapshot.Snapshot, error) {
	return callSnapshots{}.ThreadSnapshots(ctx, threadID)
}

// TestTimeTravelWithinTheStorageQuota: a rewind or a revert whose files
// would take the org past its storage quota is refused with the quota's
// refusal before it changes anything — no file restored, no message
// folded — and one that frees space is not refused, however full the
// org.
func TestTimeTravelWithinTheStorageQuota(t *testing.T) {
	ctx := context.Background()
	svc, st, p, thID, q, restores := timeTravelRig(t, 40)
	_, err := svc.RewindThread(ctx, p, thID, "a1")
	if !fault.Is(err, fault.TooLarge) || !strings.Contains(err.Error(), "storageBytesPerOrg") {
		t.Fatalf("rewind past the quota: %v, want the storage quota's refusal", err)
	}
	_, err = svc.RevertToolCall(ctx, p, thID, "c1", true)
	if !fault.Is(err, fault.TooLarge) {
		t.Fatalf("revert past the quota: %v, want the storage quota's refusal", err)
	}
	if len(q.stores) != 2 || q.stores[0] != 40 || q.stores[1] != 40 {
		t.Fatalf("the quota was asked about %v, want the 40 bytes each restore adds", q.stores)
	}
	if *restores != 0 {
		t.Fatalf("%d restores ran although refused", *restores)
	}
	if got := foldedIDs(t, st, thID); got != "" {
		t.Fatalf("a refused rewind folded %s", got)
	}

	svc, _, p, thID, q, restores = timeTravelRig(t, -40)
	if _, err := svc.RewindThread(ctx, p, thID, "a1"); err != nil {
		t.Fatalf("a rewind that frees space: %v", err)
	}
	if _, err := svc.RevertToolCall(ctx, p, thID, "c1", true); err != nil {
		t.Fatalf("a revert that frees space: %v", err)
	}
	if *restores != 2 || len(q.stores) != 0 {
		t.Fatalf("restores %d, quota asked about %v; want both restored, nothing asked", *restores, q.stores)
	}
}

// downStore is a memStore whose message folds fail as an unreachable
// database does while down is set.
type downStore struct {
	*memStore
	down *atomic.Bool
}

func (d downStore) ReplaceMessages(ctx context.Context, threadID string, ids []string) error {
	if d.down.Load() {
		return fault.New(fault.Unavailable, "the database is unavailable")
	}
	return d.memStore.ReplaceMessages(ctx, threadID, ids)
}

// downAudit keeps the events appended while down is not set.
type downAudit struct {
	down    *atomic.Bool
	mu      sync.Mutex
	actions []string
}

func (a *downAudit) AppendEvent(_ context.Context, e audit.Event) error {
	if a.down.Load() {
		return fault.New(fault.Unavailable, "the database is unavailable")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.actions = append(a.actions, e.Action)
	return nil
}

// TestTimeTravelFinishesWithoutItsClient: a rewind whose history fold
// fails once its files are restored (the database down), and a revert
// whose audit event does, answer the failure and finish on their own
// once the database is back: the history folded after the turn, each
// audited once, the thread held until then so nothing else starts on
// files and a history that disagree.
func TestTimeTravelFinishesWithoutItsClient(t *testing.T) {
	was := finishBackoff
	finishBackoff = [2]time.Duration{time.Millisecond, 10 * time.Millisecond}
	t.Cleanup(func() { finishBackoff = was })
	ctx := context.Background()
	st, down := newMemStore(), &atomic.Bool{}
	log := &downAudit{down: down}
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	restores := new(int)
	svc := New(downStore{st, down}, st, Deps{Containers: oneContainer{}, Audit: log,
		Snapshots: Snapshots{Records: snapshotsOf{}, Files: growingFiles{restores: restores}}})
	th := projectThread(t, ctx, svc, p)
	twoTurns(t, ctx, st, th.ID())
	folded := func() string { return foldedIDs(t, st, th.ID()) }

	down.Store(true)
	if _, err := svc.RewindThread(ctx, p, th.ID(), "a1"); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("rewind with the database down: %v, want it unavailable", err)
	}
	if *restores != 1 {
		t.Fatalf("%d restores, want the rewind's", *restores)
	}
	if _, err := svc.RevertToolCall(ctx, p, th.ID(), "c1", true); !fault.Is(err, fault.Conflict) {
		t.Fatalf("a revert while the rewind's fold is retried: %v, want the thread held", err)
	}
	if got := folded(); got != "" {
		t.Fatalf("folded %q with the database down", got)
	}
	down.Store(false)
	svc.finishing.Wait()
	if got := folded(); got != "u2 a2" {
		t.Fatalf("folded %q once the database was back, want %q", got, "u2 a2")
	}

	down.Store(true)
	if _, err := svc.RevertToolCall(ctx, p, th.ID(), "c1", true); !fault.Is(err, fault.Unavailable) {
		t.Fatalf("revert with the database down: %v, want it unavailable", err)
	}
	down.Store(false)
	svc.finishing.Wait()
	if got := strings.Join(log.actions, " "); got != "thread.rewind thread.call_revert" {
		t.Fatalf("audited %q, want the rewind and the revert once each", got)
	}
	// Both finished: the thread is free again.
	if _, err := svc.RewindThread(ctx, p, th.ID(), "a1"); err != nil {
		t.Fatalf("a rewind once both finished: %v", err)
	}
}

// stateFiles is growingFiles that names each snapshot's running state
// folder.
type stateFiles struct{ growingFiles }

func (stateFiles) StateDir(threadID, snapshotID string) string {
	return "/state/" + threadID + "/" + snapshotID
}

// failingState ends the sandbox before the files are restored, but
// fails to put any running state back after, as a sandbox booted in
// between that cannot be stopped does.
type failingState struct{ RunningState }

func (failingState) EndSandbox(context.Context, string) error { return nil }

func (failingState) RestoreState(context.Context, string, string, string) error {
	return errors.New("the sandbox did not stop")
}

// stuckState is a running state whose sandbox cannot be ended with the
// error end (a refused hand-over, a failed stop); it counts the states
// it was asked to put back.
type stuckState struct {
	RunningState
	end      error
	restored *int
}

func (s stuckState) EndSandbox(context.Context, string) error { return s.end }

func (s stuckState) RestoreState(context.Context, string, string, string) error {
	*s.restored++
	return s.end
}

// TestRewindRefusedWhenTheSandboxCannotEnd: a rewind whose sandbox
// cannot be ended — another server keeps it, or its stop fails — is
// refused as unavailable before it changes anything: no file restored,
// no running state put back, no message folded, so the processes of the
// later turns never run over the earlier files. The answer says nothing
// was rewound, and why where it may be told.
func TestRewindRefusedWhenTheSandboxCannotEnd(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		end  error
		want string
	}{
		{"held by another server", fault.New(fault.Unavailable, "the sandbox of container \"ctr_1\" is held by another threadbox server; try again shortly"), "held by another threadbox server"},
		{"stop failed", errors.New("containers: stop: the engine timed out"), "could not be stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore()
			p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
			restores, states := new(int), new(int)
			svc := New(st, st, Deps{Containers: oneContainer{}, Snapshots: Snapshots{Records: snapshotsOf{},
				Files: stateFiles{growingFiles{restores: restores}}, State: stuckState{end: tc.end, restored: states}}})
			th := projectThread(t, ctx, svc, p)
			twoTurns(t, ctx, st, th.ID())
			_, err := svc.RewindThread(ctx, p, th.ID(), "a1")
			if !fault.Is(err, fault.Unavailable) || !strings.Contains(fault.MessageOf(err), "nothing was rewound") || !strings.Contains(fault.MessageOf(err), tc.want) {
				t.Fatalf("rewind: %v (told %q), want it unavailable, saying nothing was rewound and %q", err, fault.MessageOf(err), tc.want)
			}
			if *restores != 0 || *states != 0 {
				t.Fatalf("%d file restores, %d running states put back; want none", *restores, *states)
			}
			if got := foldedIDs(t, st, th.ID()); got != "" {
				t.Fatalf("a refused rewind folded %q", got)
			}
			// The refusal held the thread no longer than the request.
			svc.d.Snapshots.State = stuckState{restored: states}
			if _, err := svc.RewindThread(ctx, p, th.ID(), "a1"); err != nil {
				t.Fatalf("rewind once the sandbox ends: %v", err)
			}
			if *restores != 1 || *states != 1 || foldedIDs(t, st, th.ID()) != "u2 a2" {
				t.Fatalf("after the sandbox ended: %d restores, %d states, folded %q", *restores, *states, foldedIDs(t, st, th.ID()))
			}
		})
	}
}

// TestRewindFoldsWhenTheStateFails: a rewind whose running state cannot
// be put back once the turn's files are restored still folds the
// history after the turn, so files and history agree, and its answer
// says the running state is not the turn's.
func TestRewindFoldsWhenTheStateFails(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	p := user.Principal{OrgID: "org_1", UserID: "usr_1", Role: user.Member}
	restores := new(int)
	svc := New(st, st, Deps{Containers: oneContainer{}, Snapshots: Snapshots{Records: snapshotsOf{},
		Files: stateFiles{growingFiles{restores: restores}}, State: failingState{}}})
	th := projectThread(t, ctx, svc, p)
	twoTurns(t, ctx, st, th.ID())
	r, err := svc.RewindThread(ctx, p, th.ID(), "a1")
	if err != nil {
		t.Fatalf("rewind whose running state failed: %v, want the files and history rewound", err)
	}
	if *restores != 1 {
		t.Fatalf("%d restores, want the rewind's", *restores)
	}
	if !strings.Contains(r.Note, "running state was not put back") || !strings.Contains(r.Note, "the sandbox did not stop") {
		t.Fatalf("note %q, want it to say the running state was not put back and why", r.Note)
	}
	if got := foldedIDs(t, st, th.ID()); got != "u2 a2" || strings.Join(r.Replaced, " ") != "u2 a2" {
		t.Fatalf("folded %q (answered %q) after the files were restored, want %q", got, r.Replaced, "u2 a2")
	}
}
