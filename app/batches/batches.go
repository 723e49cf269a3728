// Package batches runs Message Batches (docs/batches.md): a client's
// requests, kept in the database, run in the background through the same
// turn path as a live Messages request (app/turns Prepare), as the
// principal that created the batch. Any server on the database runs them:
// each request is claimed with a lease its server renews while it runs, so
// one whose server died (kill -9, a lost host) is claimed again by another
// or by the restarted one. A batch ends when every request has a result;
// results stay until the batch is deleted or Retention has passed.
package batches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"threadbox/app/lease"
	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/jsonfield"
	"threadbox/domain/user"
)

// The batch's processing statuses, as the Anthropic API names them.
const (
	InProgress = "in_progress"
	Canceling  = "canceling"
	Ended      = "ended"
)

// The statuses of one request: waiting, claimed by a server, or its result.
const (
	Pending   = "pending"
	Running   = "running"
	Succeeded = "succeeded"
	Errored   = "errored"
	Canceled  = "canceled"
	Expired   = "expired"
)

// Limits of the API (docs/batches.md).
const (
	MaxRequests = 10000
	// Window is how long a batch may take: requests not finished by then
	// are expired.
	Window = 24 * time.Hour
	// Retention is how long an ended batch's results are kept.
	Retention = 29 * 24 * time.Hour
	// MaxAttempts bounds how often a request whose server died is run
	// again before it is errored.
	MaxAttempts = 3
)

var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Counts are a batch's requests by state.
type Counts struct {
	Processing, Succeeded, Errored, Canceled, Expired int64
}

// Batch is one Message Batch.
type Batch struct {
	ID                string
	Principal         user.Principal // who created it; its requests run as them
	Status            string
	CreatedAt         time.Time
	ExpiresAt         time.Time
	CancelInitiatedAt time.Time // zero: not canceled
	EndedAt           time.Time // zero: not ended
	Counts            Counts
}

// Request is one request of a batch as the client sent it.
type Request struct {
	CustomID string
	Params   json.RawMessage // a Messages API request body
}

// Claimed is a request a server claimed to run.
type Claimed struct {
	BatchID   string
	CustomID  string
	Params    []byte
	Attempts  int // including this one
	Principal user.Principal
}

// Result is the outcome of one request.
type Result struct {
	CustomID     string
	Status       string // Succeeded, Errored, Canceled or Expired
	Message      []byte // the Messages response, when Succeeded
	ErrorKind    fault.Kind
	ErrorMessage string
}

// Store keeps batches and their requests (infra/store.Batches).
type Store interface {
	CreateBatch(ctx context.Context, b Batch, reqs []Request) error
	// Batch returns the org's batch with its counts; fault.NotFound when none.
	Batch(ctx context.Context, orgID, id string) (Batch, error)
	// Batches returns the user's batches of the org, newest first.
	Batches(ctx context.Context, orgID, userID string) ([]Batch, error)
	// CancelBatch marks an in-progress batch canceling at at and its
	// pending requests canceled.
	CancelBatch(ctx context.Context, orgID, id string, at time.Time) error
	// DeleteBatch deletes a batch with its requests.
	DeleteBatch(ctx context.Context, orgID, id string) error
	// ClaimRequests claims up to max requests — pending ones, and running
	// ones whose lease lapsed before now — for holder until until, at most
	// perOrg running at once in any org, one claim at a time on the
	// database.
	ClaimRequests(ctx context.Context, holder string, now, until time.Time, perOrg, max int) ([]Claimed, error)
	// RenewRequest extends holder's claim of a request.
	RenewRequest(ctx context.Context, holder, batchID, customID string, until time.Time) error
	// FinishRequest records the result of a request holder claims.
	FinishRequest(ctx context.Context, holder, batchID string, r Result) error
	// ReleaseRequest gives back holder's claim of a request it stopped
	// running (a graceful shutdown), uncounted, so that any server runs
	// it at once.
	ReleaseRequest(ctx context.Context, holder, batchID, customID string) error
	// SettleBatches expires the pending and lapsed requests of batches past
	// their expiry, ends the batches with every request finished at now,
	// and deletes ended batches older than the retention cutoff.
	SettleBatches(ctx context.Context, now, cutoff time.Time) error
	// Results returns a batch's results in the order of its requests.
	Results(ctx context.Context, orgID, id string) ([]Result, error)
}

// Users finds the creator of a batch when its requests run
// (infra/store.Accounts).
type Users interface {
	User(ctx context.Context, id string) (user.User, error)
}

// Preparer prepares a Messages turn (app/turns.Service).
type Preparer interface {
	Prepare(ctx context.Context, p user.Principal, req *wire.Request, th *turns.Thread) (*turns.Turn, error)
}

// Config tunes the runner.
type Config struct {
	Holder  string        // names this process in claims
	Lease   time.Duration // how long a claim outlives its last renewal
	Workers int           // requests this process runs at once
	PerOrg  int           // requests of one org running at once, on every server together
	Poll    time.Duration // how often to look for work
	// Users, when set, is asked before each request runs: one whose
	// creator was disabled or removed (or left the org) meanwhile is
	// errored instead of running.
	Users Users
}

// Service is the Message Batches use cases and their runner.
type Service struct {
	store Store
	turns Preparer
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	wake  chan struct{}
}

// New returns the batches over store, running requests through t.
func New(store Store, t Preparer, cfg Config, log *slog.Logger) *Service {
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.PerOrg <= 0 {
		cfg.PerOrg = 4
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	return &Service{store: store, turns: t, cfg: cfg, log: log, now: time.Now, wake: make(chan struct{}, 1)}
}

// errSandboxToken refuses Message Batches to a sandbox token. The token
// lives for one turn and acts on its own container only, while a batch
// runs after the turn has ended and lists, reads and cancels every batch
// of the user, whatever container their requests ran in.
var errSandboxToken = fault.New(fault.Forbidden, "a sandbox token cannot use Message Batches: a batch runs after the turn that made the token has ended")

// Create checks and records a batch; its requests start in the background.
func (s *Service) Create(ctx context.Context, p user.Principal, reqs []Request) (Batch, error) {
	if p.Kind == user.SandboxToken {
		return Batch{}, errSandboxToken
	}
	if len(reqs) == 0 {
		return Batch{}, fault.New(fault.Invalid, "requests: at least one request is required")
	}
	if len(reqs) > MaxRequests {
		return Batch{}, fault.Errorf(fault.Invalid, "requests: at most %d requests per batch", MaxRequests)
	}
	seen := make(map[string]bool, len(reqs))
	for i, r := range reqs {
		if !customIDPattern.MatchString(r.CustomID) {
			return Batch{}, fault.Errorf(fault.Invalid, "requests.%d.custom_id: 1 to 64 letters, digits, '-' and '_'", i)
		}
		if seen[r.CustomID] {
			return Batch{}, fault.Errorf(fault.Invalid, "requests.%d.custom_id: %q is used twice; each request needs its own", i, r.CustomID)
		}
		seen[r.CustomID] = true
		var req wire.Request
		if len(r.Params) == 0 {
			return Batch{}, fault.Errorf(fault.Invalid, "requests.%d.params: required", i)
		}
		if err := req.UnmarshalJSON(r.Params); err != nil {
			at := fmt.Sprintf("requests.%d.params", i)
			if te, ok := errors.AsType[*jsonfield.FieldError](err); ok {
				return Batch{}, fault.Wrap(fault.Invalid, te.Under(at).Error(), err)
			}
			return Batch{}, fault.Errorf(fault.Invalid, "%s: %v", at, err)
		}
		if req.Stream {
			return Batch{}, fault.Errorf(fault.Invalid, "requests.%d.params.stream: a batch request cannot stream", i)
		}
	}
	now := s.now().UTC()
	b := Batch{ID: id.New("msgbatch"), Principal: p, Status: InProgress, CreatedAt: now, ExpiresAt: now.Add(Window),
		Counts: Counts{Processing: int64(len(reqs))}}
	if err := s.store.CreateBatch(ctx, b, reqs); err != nil {
		return Batch{}, err
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return b, nil
}

// Get returns a batch of the caller's.
func (s *Service) Get(ctx context.Context, p user.Principal, batchID string) (Batch, error) {
	if p.Kind == user.SandboxToken {
		return Batch{}, errSandboxToken
	}
	b, err := s.store.Batch(ctx, p.OrgID, batchID)
	if err != nil || b.Principal.UserID != p.UserID {
		return Batch{}, fault.Errorf(fault.NotFound, "message batch not found: %s", batchID)
	}
	return b, nil
}

// List returns the caller's batches, newest first.
func (s *Service) List(ctx context.Context, p user.Principal) ([]Batch, error) {
	if p.Kind == user.SandboxToken {
		return nil, errSandboxToken
	}
	return s.store.Batches(ctx, p.OrgID, p.UserID)
}

// Cancel stops a batch: requests not started are canceled, those running
// finish; the batch ends once they have.
func (s *Service) Cancel(ctx context.Context, p user.Principal, batchID string) (Batch, error) {
	b, err := s.Get(ctx, p, batchID)
	if err != nil {
		return Batch{}, err
	}
	if b.Status == InProgress {
		if err := s.store.CancelBatch(ctx, p.OrgID, b.ID, s.now().UTC()); err != nil {
			return Batch{}, err
		}
		s.settle(ctx)
	}
	return s.Get(ctx, p, batchID)
}

// Delete deletes an ended batch with its results.
func (s *Service) Delete(ctx context.Context, p user.Principal, batchID string) error {
	b, err := s.Get(ctx, p, batchID)
	if err != nil {
		return err
	}
	if b.Status != Ended {
		return fault.Errorf(fault.Conflict, "message batch %s is %s: cancel it and delete it once it has ended", b.ID, b.Status)
	}
	return s.store.DeleteBatch(ctx, p.OrgID, b.ID)
}

// Results returns an ended batch's results in the order of its requests.
func (s *Service) Results(ctx context.Context, p user.Principal, batchID string) ([]Result, error) {
	b, err := s.Get(ctx, p, batchID)
	if err != nil {
		return nil, err
	}
	if b.Status != Ended {
		return nil, fault.Errorf(fault.Conflict, "message batch %s is %s: its results are ready once processing_status is ended", b.ID, b.Status)
	}
	return s.store.Results(ctx, p.OrgID, b.ID)
}

// settle ends what has finished, expires what is late and forgets what is
// past retention; failures are logged (the next round retries).
func (s *Service) settle(ctx context.Context) {
	now := s.now().UTC()
	if err := s.store.SettleBatches(ctx, now, now.Add(-Retention)); err != nil && ctx.Err() == nil {
		s.log.Error("message batches not settled", "cause", err.Error())
	}
}

// Run claims and runs requests until ctx ends: Workers at once on this
// process, PerOrg at once per org on every server together.
func (s *Service) Run(ctx context.Context) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		busy int
	)
	defer wg.Wait()
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	done := make(chan struct{}, s.cfg.Workers)
	for {
		s.settle(ctx)
		mu.Lock()
		free := s.cfg.Workers - busy
		mu.Unlock()
		if free > 0 {
			now := s.now().UTC()
			claimed, err := s.store.ClaimRequests(ctx, s.cfg.Holder, now, now.Add(s.cfg.Lease), s.cfg.PerOrg, free)
			if err != nil && ctx.Err() == nil {
				s.log.Error("message batch requests not claimed", "cause", err.Error())
			}
			for _, c := range claimed {
				mu.Lock()
				busy++
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.runOne(ctx, c)
					mu.Lock()
					busy--
					mu.Unlock()
					select {
					case done <- struct{}{}:
					default:
					}
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		case <-done:
		}
	}
}

// runOne runs a claimed request through the turn path and records its
// result, renewing the claim while it runs. A request whose server stops
// before it finishes keeps its claim until the lease lapses; then it is
// claimed again (MaxAttempts at most).
func (s *Service) runOne(ctx context.Context, c Claimed) {
	defer func() {
		if r := recover(); r != nil { // a panic errors the request, not the server
			s.log.Error("panic in a batch request", "batch", c.BatchID, "custom_id", c.CustomID, "panic", fmt.Sprint(r))
			s.finish(ctx, c, Result{CustomID: c.CustomID, Status: Errored, ErrorKind: fault.Internal, ErrorMessage: "Internal server error."})
		}
	}()
	if c.Attempts > MaxAttempts {
		s.finish(ctx, c, Result{CustomID: c.CustomID, Status: Errored, ErrorKind: fault.Internal,
			ErrorMessage: fmt.Sprintf("the request was interrupted %d times (its server stopped) and is not run again", MaxAttempts)})
		return
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go lease.Every(runCtx, s.cfg.Lease/3, func() {
		if err := s.store.RenewRequest(runCtx, s.cfg.Holder, c.BatchID, c.CustomID, s.now().UTC().Add(s.cfg.Lease)); err != nil && runCtx.Err() == nil {
			s.log.Warn("batch request claim not renewed", "batch", c.BatchID, "custom_id", c.CustomID, "cause", err.Error())
		}
	})
	msg, err := s.run(runCtx, c)
	if ctx.Err() != nil {
		// Shutting down: the request runs again, here or elsewhere.
		if err := s.store.ReleaseRequest(context.WithoutCancel(ctx), s.cfg.Holder, c.BatchID, c.CustomID); err != nil {
			s.log.Warn("batch request claim not given back; it lapses", "batch", c.BatchID, "custom_id", c.CustomID, "cause", err.Error())
		}
		return
	}
	res := Result{CustomID: c.CustomID, Status: Succeeded, Message: msg}
	if err != nil {
		f := messages.Fault(err)
		res = Result{CustomID: c.CustomID, Status: Errored, ErrorKind: fault.KindOf(f), ErrorMessage: fault.MessageOf(f)}
		if res.ErrorKind == fault.Internal {
			s.log.Error("batch request failed", "batch", c.BatchID, "custom_id", c.CustomID, "cause", err.Error())
			res.ErrorMessage = "Internal server error."
		}
	}
	s.finish(ctx, c, res)
}

// run runs one request as a live non-streamed Messages request does, as
// its batch's creator, whose role is read again. A batch a sandbox token
// created (stored before such tokens were refused) does not run: its
// token ended with its turn.
func (s *Service) run(ctx context.Context, c Claimed) ([]byte, error) {
	p := c.Principal
	if p.Kind == user.SandboxToken {
		return nil, errSandboxToken
	}
	if s.cfg.Users != nil {
		u, err := s.cfg.Users.User(ctx, p.UserID)
		switch {
		case fault.Is(err, fault.NotFound) || err == nil && (u.Disabled() || u.OrgID() != p.OrgID):
			return nil, fault.New(fault.Forbidden, "the user who created this batch is disabled or no longer in the organization")
		case err != nil:
			return nil, err
		}
		p.Role = u.Role()
	}
	var req wire.Request
	if err := req.UnmarshalJSON(c.Params); err != nil {
		return nil, fault.Errorf(fault.Invalid, "invalid request body: %v", err)
	}
	turn, err := s.turns.Prepare(ctx, p, &req, nil)
	if err != nil {
		return nil, err
	}
	var col messages.Collector
	if err := turn.Run(ctx, &col); err != nil {
		return nil, err
	}
	return col.Response().MarshalJSON()
}

func (s *Service) finish(ctx context.Context, c Claimed, r Result) {
	if err := s.store.FinishRequest(context.WithoutCancel(ctx), s.cfg.Holder, c.BatchID, r); err != nil {
		s.log.Error("batch request result not recorded", "batch", c.BatchID, "custom_id", c.CustomID, "cause", err.Error())
		return
	}
	s.settle(context.WithoutCancel(ctx))
}
