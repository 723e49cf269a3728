package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"threadbox/app/messages/wire"
	"threadbox/domain/artifact"
	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// fakeQuota refuses turns when refuseRun is set, answers StorageLeft from
// left (refusing at zero as the real one does) and refuses every
// BeforeStore when refuseStore is set; it records calls.
type fakeQuota struct {
	refuseRun   bool
	left        int64
	leftErr     error
	refuseStore bool
	runs        []string // container ids asked about
	storageAsk  int
	stores      []int64 // BeforeStore's bytes
}

func (q *fakeQuota) BeforeRun(_ context.Context, orgID, userID, containerID string) error {
	q.runs = append(q.runs, containerID)
	if q.refuseRun {
		return fault.New(fault.RateLimited, `quota "runningSandboxesPerUser" reached`)
	}
	return nil
}

func (q *fakeQuota) StorageLeft(context.Context, string) (int64, error) {
	q.storageAsk++
	if q.leftErr != nil {
		return 0, q.leftErr
	}
	if q.left == 0 {
		return 0, org.StorageExceeded(100, 100, 0)
	}
	return q.left, nil
}

func (q *fakeQuota) BeforeStore(_ context.Context, _ string, n int64) error {
	q.stores = append(q.stores, n)
	if q.refuseStore {
		return org.StorageExceeded(100, 100, n)
	}
	return nil
}

var codeExecTurn = TurnRequest{
	Content: []wire.ContentBlock{{Type: "text", Text: "go"}},
	Tools:   []AskedTool{{wire.Tool{Name: "code_execution"}}},
}

func TestTurnRefusedPastTheRunningQuota(t *testing.T) {
	ctx := context.Background()
	q := &fakeQuota{refuseRun: true}
	svc, st, p, th := setupQuota(t, scriptEngine{}, q)
	// A turn without code execution boots nothing: not asked.
	turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: codeExecTurn.Content})
	if err != nil || len(q.runs) != 0 {
		t.Fatalf("plain turn: %v, asked %v", err, q.runs)
	}
	turn.Abort()
	_, err = svc.StartTurn(ctx, p, th.ID(), codeExecTurn)
	if !fault.Is(err, fault.RateLimited) || len(q.runs) != 1 || q.runs[0] != th.ID() {
		t.Fatalf("code-execution turn: %v, asked %v", err, q.runs)
	}
	if ms, _ := st.Messages(ctx, th.ID()); len(ms) != 0 {
		t.Fatalf("a refused turn stored %d messages", len(ms))
	}
	// The thread is not left claimed: with room, the turn runs.
	q.refuseRun = false
	turn, err = svc.StartTurn(ctx, p, th.ID(), codeExecTurn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestArtifactCaptureWithinTheStorageQuota(t *testing.T) {
	// setup's container has one 10-byte output file.
	cases := []struct {
		name  string
		quota *fakeQuota // nil: no quota port
		kept  bool
		asked int
	}{
		{"no quota port", nil, true, 0},
		{"unlimited", &fakeQuota{left: -1}, true, 1},
		{"fits", &fakeQuota{left: 10}, true, 1},
		{"does not fit", &fakeQuota{left: 9}, false, 1},
		{"nothing left", &fakeQuota{left: 0}, false, 1},
		{"the quota cannot be measured", &fakeQuota{leftErr: errors.New("disk gone")}, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			svc, _, p, th := setupQuota(t, scriptEngine{}, tc.quota)
			turn, err := svc.StartTurn(ctx, p, th.ID(), TurnRequest{Content: codeExecTurn.Content})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := turn.Run(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			blocks := 0
			for _, b := range resp.Content {
				if b.Type == BlockResource {
					blocks++
				}
			}
			arts, _, _ := svc.Artifacts(ctx, p, th.ProjectID(), artifact.Page{})
			if kept := len(arts) == 1 && blocks == 1; kept != tc.kept || len(arts) != blocks {
				t.Fatalf("artifacts %d, blocks %d, want kept=%v", len(arts), blocks, tc.kept)
			}
			if tc.quota != nil && tc.quota.storageAsk != tc.asked {
				t.Fatalf("storage asked %d times, want %d", tc.quota.storageAsk, tc.asked)
			}
		})
	}
}

func TestTurnWithinTheStorageQuota(t *testing.T) {
	ctx := context.Background()
	q := &fakeQuota{refuseStore: true}
	svc, st, p, th := setupQuota(t, scriptEngine{}, q)
	want, _ := json.Marshal(codeExecTurn.Content)
	// Refused before anything is stored, asking for the user message's
	// stored bytes, whether or not the turn may run code.
	for _, tr := range []TurnRequest{{Content: codeExecTurn.Content}, codeExecTurn} {
		q.stores = nil
		if _, err := svc.StartTurn(ctx, p, th.ID(), tr); !fault.Is(err, fault.TooLarge) || len(q.stores) != 1 || q.stores[0] != int64(len(want)) {
			t.Fatalf("turn past the storage quota: %v, asked %v, want [%d]", err, q.stores, len(want))
		}
	}
	if ms, _ := st.Messages(ctx, th.ID()); len(ms) != 0 {
		t.Fatalf("a refused turn stored %d messages", len(ms))
	}
	// With room the turn runs, and the thread is not left claimed.
	q.refuseStore = false
	turn, err := svc.StartTurn(ctx, p, th.ID(), codeExecTurn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// Asking the stored message again stores no user message: only an
	// org with nothing left is refused.
	q.stores = nil
	turn, err = svc.StartTurn(ctx, p, th.ID(), TurnRequest{Replace: ReplaceLastAnswer})
	if err != nil || len(q.stores) != 1 || q.stores[0] != 0 {
		t.Fatalf("regenerate: %v, asked %v", err, q.stores)
	}
	turn.Abort()
}
