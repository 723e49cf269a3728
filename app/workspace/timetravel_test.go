package workspace

import (
	"context"
	"strings"
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
	for _, m := range []struct {
		id   string
		role thread.Role
	}{{"u1", thread.User}, {"a1", thread.Assistant}, {"u2", thread.User}, {"a2", thread.Assistant}} {
		msg, err := thread.NewMessage(m.id, th.ID(), m.role, []byte("[]"), true, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.RewindThread(ctx, p, th.ID(), "a1"); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	ms, err := st.Messages(context.Background(), th.ID())
	if err != nil {
		t.Fatal(err)
	}
	var folded []string
	for _, m := range ms {
		if m.Replaced() {
			folded = append(folded, m.ID())
		}
	}
	if got := strings.Join(folded, " "); got != "u2 a2" {
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
