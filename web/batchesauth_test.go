package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/batches"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// memBatches keeps batches in memory (batches.Store); the runner is not
// started, so only what the API's handlers call does anything.
type memBatches struct {
	mu sync.Mutex
	m  map[string]batches.Batch
}

func (r *memBatches) CreateBatch(_ context.Context, b batches.Batch, _ []batches.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[b.ID] = b
	return nil
}

func (r *memBatches) Batch(_ context.Context, orgID, id string) (batches.Batch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.m[id]; ok && b.Principal.OrgID == orgID {
		return b, nil
	}
	return batches.Batch{}, fault.New(fault.NotFound, "message batch not found")
}

func (r *memBatches) Batches(_ context.Context, orgID, userID string) ([]batches.Batch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []batches.Batch
	for _, b := range r.m {
		if b.Principal.OrgID == orgID && b.Principal.UserID == userID {
			out = append(out, b)
		}
	}
	return out, nil
}

func (r *memBatches) CancelBatch(_ context.Context, orgID, id string, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.m[id]; ok && b.Principal.OrgID == orgID {
		b.Status, b.CancelInitiatedAt = batches.Canceling, at
		r.m[id] = b
	}
	return nil
}

func (r *memBatches) DeleteBatch(_ context.Context, _, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
	return nil
}

func (r *memBatches) ClaimRequests(context.Context, string, time.Time, time.Time, int, int) ([]batches.Claimed, error) {
	return nil, nil
}
func (r *memBatches) RenewRequest(context.Context, string, string, string, time.Time) error {
	return nil
}
func (r *memBatches) FinishRequest(context.Context, string, string, batches.Result) error { return nil }
func (r *memBatches) ReleaseRequest(context.Context, string, string, string) error        { return nil }
func (r *memBatches) SettleBatches(context.Context, time.Time, time.Time) error           { return nil }
func (r *memBatches) Results(context.Context, string, string) ([]batches.Result, error) {
	return nil, nil
}

// TestSandboxTokensUseNoBatches calls every Message Batches endpoint as a
// sandbox token, as code in a turn's sandbox could: a batch runs after the
// turn (and its token) ended and the endpoints reach every batch of the
// user, so each is refused with 403 and nothing is made or canceled; the
// user's own API token creates and cancels.
func TestSandboxTokensUseNoBatches(t *testing.T) {
	st := &memBatches{m: map[string]batches.Batch{}}
	srv := &Server{log: slog.New(slog.DiscardHandler), svc: Services{Batches: batches.New(st, nil, batches.Config{}, slog.New(slog.DiscardHandler))}}
	api := user.Principal{UserID: "usr_1", OrgID: "org_1", Role: user.Member, TokenID: "tok_1", Kind: user.APIToken}
	sandbox := api
	sandbox.TokenID, sandbox.Kind, sandbox.ContainerID = "tok_2", user.SandboxToken, "thr_1"

	call := func(p user.Principal, method, path, body string) (int, string, []byte) {
		t.Helper()
		app := fiber.New(fiber.Config{ErrorHandler: srv.errorHandler})
		as := func(c *fiber.Ctx) error { c.Locals(principalKey, p); return c.Next() }
		app.Post(batchesPrefix, as, srv.batchesOn, srv.createBatch)
		app.Get(batchesPrefix, as, srv.batchesOn, srv.listBatches)
		app.Get(batchesPrefix+"/:message_batch_id", as, srv.batchesOn, srv.getBatch)
		app.Delete(batchesPrefix+"/:message_batch_id", as, srv.batchesOn, srv.deleteBatch)
		app.Post(batchesPrefix+"/:message_batch_id/cancel", as, srv.batchesOn, srv.cancelBatch)
		app.Get(batchesPrefix+"/:message_batch_id/results", as, srv.batchesOn, srv.batchResults)
		return callAs(t, app, method, path, body)
	}
	const create = `{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}}]}`

	if status, typ, _ := call(sandbox, "POST", batchesPrefix, create); status != fiber.StatusForbidden || typ != "permission_error" {
		t.Fatalf("a sandbox token creating a batch: %d %s, want 403 permission_error", status, typ)
	}
	if n := len(st.m); n != 0 {
		t.Fatalf("%d batches stored after the sandbox token's refused create", n)
	}
	status, _, body := call(api, "POST", batchesPrefix, create)
	var made struct{ ID string }
	if err := json.Unmarshal(body, &made); status != fiber.StatusOK || err != nil || made.ID == "" {
		t.Fatalf("the user's API token creating a batch: %d %s", status, body)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", batchesPrefix},
		{"GET", batchesPrefix + "/" + made.ID},
		{"POST", batchesPrefix + "/" + made.ID + "/cancel"},
		{"GET", batchesPrefix + "/" + made.ID + "/results"},
		{"DELETE", batchesPrefix + "/" + made.ID},
	} {
		if status, typ, _ := call(sandbox, c.method, c.path, ""); status != fiber.StatusForbidden || typ != "permission_error" {
			t.Errorf("a sandbox token: %s %s: %d %s, want 403 permission_error", c.method, c.path, status, typ)
		}
	}
	if b := st.m[made.ID]; b.Status != batches.InProgress {
		t.Fatalf("the user's batch is %q after the sandbox token's refused cancel, want %q", b.Status, batches.InProgress)
	}
	if status, _, body := call(api, "POST", batchesPrefix+"/"+made.ID+"/cancel", ""); status != fiber.StatusOK {
		t.Fatalf("the user's API token canceling its batch: %d %s", status, body)
	}
}
