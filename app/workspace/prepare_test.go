package workspace

import (
	"context"
	"testing"

	"threadbox/app/files"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/user"
)

// someFiles holds the container files named by id.
type someFiles map[string]bool

func (f someFiles) Metadata(_ context.Context, _ user.Principal, scopeID, fileID string) (files.File, error) {
	if !f[fileID] {
		return files.File{}, fault.Errorf(fault.NotFound, "no file %q", fileID)
	}
	return files.File{ID: fileID, ScopeID: scopeID}, nil
}

// TestSandboxToolTurnAsksTheRunningQuota: a chat turn that asks only the
// sandbox_v1 tools may boot the thread's sandbox as a code-execution turn
// does, so it is refused past the running-sandbox quota before anything
// is stored, as a Messages API request with those tools is.
func TestSandboxToolTurnAsksTheRunningQuota(t *testing.T) {
	ctx := context.Background()
	q := &fakeQuota{refuseRun: true}
	svc, st, p, th := setupQuota(t, scriptEngine{}, q)
	tr := TurnRequest{
		Content: codeExecTurn.Content,
		Tools:   []AskedTool{{wire.Tool{Name: messages.SandboxToolName}}},
	}
	if _, err := svc.StartTurn(ctx, p, th.ID(), tr); !fault.Is(err, fault.RateLimited) || len(q.runs) != 1 || q.runs[0] != th.ID() {
		t.Fatalf("sandbox-tool turn: %v, asked %v", err, q.runs)
	}
	if ms, _ := st.Messages(ctx, th.ID()); len(ms) != 0 {
		t.Fatalf("a refused turn stored %d messages", len(ms))
	}
}

// TestChatTurnUploadsAreChecked: a chat turn's container_upload blocks
// must name files of the thread's container, as a Messages API request's
// must: one naming no file is refused before anything is stored. The
// history's uploads were checked when they were asked: a file deleted
// since does not refuse the next turn.
func TestChatTurnUploadsAreChecked(t *testing.T) {
	ctx := context.Background()
	a, b := file.EncodeID("/mnt/user-data/uploads/a.txt"), file.EncodeID("/mnt/user-data/uploads/b.txt")
	have := someFiles{a: true}
	svc, st, p, th := setupWith(t, scriptEngine{}, func(td *turns.Deps, _ *Deps) { td.Files = have })
	upload := func(id string) TurnRequest {
		return TurnRequest{Content: []wire.ContentBlock{{Type: wire.BlockText, Text: "look"}, {Type: wire.BlockContainerUpload, FileID: id}}}
	}
	if _, err := svc.StartTurn(ctx, p, th.ID(), upload(b)); !fault.Is(err, fault.Invalid) {
		t.Fatalf("an upload of no file: %v", err)
	}
	if ms, _ := st.Messages(ctx, th.ID()); len(ms) != 0 {
		t.Fatalf("a refused turn stored %d messages", len(ms))
	}
	turn, err := svc.StartTurn(ctx, p, th.ID(), upload(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	delete(have, a)
	turn, err = svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: codeExecTurn.Content})
	if err != nil {
		t.Fatalf("the next turn after the history's file was deleted: %v", err)
	}
	turn.Abort()
}
