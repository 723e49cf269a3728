// Package usage meters what users spend: the commands they run in sandboxes
// (count, wall time and CPU time), the time their sandboxes run (and the CPU
// time those use) and the model tokens of their requests,
// added to durable counters per org, user, container, thread and UTC day,
// and reported to the org's admins.
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// DayLayout is the format of a day: a UTC calendar date.
const DayLayout = "2006-01-02"

// MaxDays is the longest span one report covers.
const MaxDays = 366

// Usage is an amount to add to the counters of an org's user on a day, in
// a container and its thread (both empty when the usage had none, for
// example the tokens of a Messages API request without a container).
type Usage struct {
	OrgID       string
	UserID      string
	ContainerID string // storage id of the container
	ThreadID    string // the container's thread, empty for a user container
	// Day is the UTC calendar date the usage counts on (YYYY-MM-DD).
	Day string
	// Key, when set, names this write: a write whose key the store has
	// recorded already adds nothing, so a write sent again after its
	// commit's answer was lost counts once. A buffered sum gets one when
	// it is first written, and keeps it until a write succeeds.
	Key string
	Counts
}

// Counts are what usage counts: commands with their wall and CPU time,
// model tokens, and sandbox time.
type Counts struct {
	Commands     int64
	Wall         time.Duration
	CPU          time.Duration
	InputTokens  int64
	OutputTokens int64
	// SandboxTime is how long sandboxes ran; SandboxCPU the CPU time their
	// control groups used (every process in them, idle or not).
	SandboxTime time.Duration
	SandboxCPU  time.Duration
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Commands += o.Commands
	c.Wall += o.Wall
	c.CPU += o.CPU
	c.InputTokens += o.InputTokens
	c.OutputTokens += o.OutputTokens
	c.SandboxTime += o.SandboxTime
	c.SandboxCPU += o.SandboxCPU
}

// GroupBy is how a report groups its rows.
type GroupBy string

// The groupings of a report.
const (
	ByDay       GroupBy = "day"
	ByUser      GroupBy = "user"
	ByContainer GroupBy = "container"
	ByThread    GroupBy = "thread"
)

// Row is one row of a report: the sums over the report's span of a day
// (Day set), of a user (UserID and Email set), of a container (ContainerID,
// its ClientID, ThreadID, UserID and Email set; ContainerID empty for usage
// outside any container) or of a thread (ThreadID and its Title set, with
// its owner's UserID and Email; ThreadID empty for usage outside threads).
// ClientID and Title are empty once their container or thread is deleted.
type Row struct {
	Day         string
	UserID      string
	Email       string
	ContainerID string
	ClientID    string
	ThreadID    string
	Title       string
	Counts
}

// Store keeps the daily counters.
type Store interface {
	// AddUsage adds u to the counters of (u.OrgID, u.UserID, u.Day,
	// u.ContainerID, u.ThreadID), creating them at zero first, and records
	// u.Key in the same transaction; a u whose Key is recorded already adds
	// nothing.
	AddUsage(ctx context.Context, u Usage) error
	// PruneUsageKeys forgets the keys of the writes recorded before t.
	PruneUsageKeys(ctx context.Context, t time.Time) error
	// UsageReport sums the org's counters of the days from..to (inclusive,
	// YYYY-MM-DD) grouped by day, user, container or thread, ordered by the
	// grouping's key.
	UsageReport(ctx context.Context, orgID, from, to string, by GroupBy) ([]Row, error)
}

// Run is a command (or cell, or session) running now, as recorded when it
// started: whose it is, the server that runs it, when it started and when
// that server last saw it running.
type Run struct {
	ID          string
	OrgID       string
	UserID      string
	ContainerID string
	ThreadID    string
	Holder      string
	StartedAt   time.Time
	SeenAt      time.Time
}

// Ended is a run that ended with the usage it counts (none for a command
// that never started: only its record goes).
type Ended struct {
	RunID string
	Usage Usage
}

// Runs keeps a record of every command while it runs (infra/store.Usage),
// so that the commands of a server that dies are still metered.
type Runs interface {
	// StartRun records a run.
	StartRun(ctx context.Context, r Run) error
	// SeeRuns marks every run of holder seen running at t.
	SeeRuns(ctx context.Context, holder string, t time.Time) error
	// StaleRuns lists the runs last seen before t.
	StaleRuns(ctx context.Context, t time.Time) ([]Run, error)
	// EndRuns, in one transaction, deletes the records of the ended runs
	// and adds the usage of each whose record it deleted (one deleted
	// already, settled by another server, adds nothing), then adds sums
	// as AddUsage does (one whose Key is recorded already adds nothing).
	EndRuns(ctx context.Context, ended []Ended, sums []Usage) error
}

// Containers looks a container up by its storage id.
type Containers interface {
	Container(ctx context.Context, id string) (container.Container, error)
}

// Service records usage and reports it.
type Service struct {
	store      Store
	containers Containers
	now        func() time.Time
	log        *slog.Logger

	every time.Duration // with Deps.Buffer: how often Run writes the pending sums
	// flushMu makes flushes one at a time: a report's flush waits for one
	// under way, whose sums it would otherwise not see written.
	flushMu sync.Mutex
	mu      sync.Mutex
	pending map[counter]Usage // metered but not yet written, by counter
	// retry are the sums of failed writes, each with its Key: sent again
	// as they were, never merged with later metering, since the write may
	// have landed all the same.
	retry  []Usage
	owners map[string]owner // containers looked up, by id (their org, owner and thread never change)

	// With Deps.Runs: the record of each run, this server's name in them,
	// how often Run settles the runs of servers gone (and after how long
	// unseen a run's server is taken for gone), the runs this server
	// started that have not ended, and those ended but not yet written.
	runs    Runs
	holder  string
	settle  time.Duration
	stale   time.Duration
	running int
	ended   []Ended
}

// counter names one row of counters: an org's user on a day, in a
// container and its thread.
type counter struct{ org, user, day, container, thread string }

// owner is what metering needs of a container.
type owner struct{ org, user, thread string }

// maxOwners bounds the containers remembered; past it the memory starts
// over.
const maxOwners = 4096

// ownerOf looks the container up, remembering it: metering a request
// must not cost a database read each time.
func (s *Service) ownerOf(ctx context.Context, id string) (owner, error) {
	s.mu.Lock()
	o, ok := s.owners[id]
	s.mu.Unlock()
	if ok {
		return o, nil
	}
	c, err := s.containers.Container(ctx, id)
	if err != nil {
		return owner{}, err
	}
	o = owner{c.OrgID(), c.OwnerID(), c.ThreadID()}
	s.mu.Lock()
	if s.owners == nil || len(s.owners) >= maxOwners {
		s.owners = map[string]owner{}
	}
	s.owners[id] = o
	s.mu.Unlock()
	return o, nil
}

// Deps is what usage metering is built from. Store and Containers are
// required.
type Deps struct {
	// Store keeps the daily counters; Containers looks containers up
	// (both required).
	Store      Store
	Containers Containers
	// Buffer, when positive, makes the metering of requests, commands and
	// sandbox time (Tokens, Begin, Sandbox) add to sums in memory that Run
	// writes every Buffer, one write per counter, instead of a database
	// write per request: on the Messages API's hot path that write and the
	// commit it makes (which also ends the store's lookup caches) were a
	// sixth of a request's CPU. A report writes the pending sums first. A
	// crash loses at most one interval's tokens and sandbox time; with
	// Runs, a command ended but not yet written keeps its record until it
	// is, so a crash leaves it to be settled instead.
	Buffer time.Duration
	// Runs, when set (with Buffer), makes every command record its start
	// in Runs, under this server's name Holder, and its end with its
	// usage, so that a command whose server dies while it runs is metered
	// all the same: Run marks this server's running commands seen at each
	// write of the buffered sums, and every Settle interval counts the
	// commands of servers not seen for Stale (one command, its wall time
	// until its server was last seen, no CPU time).
	Runs          Runs
	Holder        string
	Settle, Stale time.Duration
	// Now tells the time (default time.Now); Log gets the failures of
	// recording (nil discards them).
	Now func() time.Time
	Log *slog.Logger
}

// New returns usage metering built from d. A missing required dependency
// is a wiring mistake: New panics naming it.
func New(d Deps) *Service {
	if d.Store == nil {
		panic("usage: New: Deps.Store is required")
	}
	if d.Containers == nil {
		panic("usage: New: Deps.Containers is required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Service{store: d.Store, containers: d.Containers, now: d.Now, log: d.Log,
		runs: d.Runs, holder: d.Holder, settle: d.Settle, stale: d.Stale}
	if d.Buffer > 0 {
		s.every, s.pending = d.Buffer, map[counter]Usage{}
	}
	return s
}

// Record adds u to its counters; an empty Day means today (UTC).
func (s *Service) Record(ctx context.Context, u Usage) error {
	if u.OrgID == "" || u.UserID == "" {
		return fault.New(fault.Invalid, "usage: org and user are required")
	}
	if u.Day == "" {
		u.Day = s.now().UTC().Format(DayLayout)
	}
	if err := s.store.AddUsage(ctx, u); err != nil {
		return fmt.Errorf("usage: record: %w", err)
	}
	return nil
}

// Begin records that a command (a bash command, a Python cell, a REPL
// call, a session) starts in the container and returns the function that
// meters it once it ended, whatever ended it: called with the command's
// result and error, it counts one command for the container's org and
// owner with its wall time (res.Duration, or the time since Begin when
// that is zero) and CPU time, unless err is marked sandbox.ErrNotStarted
// (nothing ran). A command cut short by a stop, a timeout, a lost client
// or a dead sandbox counts what is known of it. Only the first call of
// the function counts. Failures are logged, never returned: metering
// never fails a command.
func (s *Service) Begin(ctx context.Context, containerID string) func(res sandbox.Result, err error) {
	started := s.now()
	runID, o := s.startRun(ctx, containerID, started)
	var once sync.Once
	return func(res sandbox.Result, err error) {
		once.Do(func() {
			u := Usage{Counts: Counts{Commands: 1, Wall: res.Duration, CPU: res.CPUTime}}
			if u.Wall <= 0 {
				u.Wall = max(s.now().Sub(started), 0)
			}
			if errors.Is(err, sandbox.ErrNotStarted) {
				u = Usage{}
			}
			if runID == "" {
				if u.Commands > 0 {
					s.forContainer(ctx, containerID, u)
				}
				return
			}
			s.endRun(ctx, runID, containerID, o, u)
		})
	}
}

// startRun records the start of a run in the container, when runs are
// tracked; it returns the run's id and whom it counts for, or "" when
// none was recorded.
func (s *Service) startRun(ctx context.Context, containerID string, at time.Time) (string, owner) {
	if s.runs == nil {
		return "", owner{}
	}
	ctx = context.WithoutCancel(ctx)
	o, err := s.ownerOf(ctx, containerID)
	if err != nil {
		s.log.Warn("run not recorded: container lookup", "container", containerID, "cause", err.Error())
		return "", owner{}
	}
	r := Run{ID: id.New("run"), OrgID: o.org, UserID: o.user, ContainerID: containerID, ThreadID: o.thread, Holder: s.holder, StartedAt: at.UTC(), SeenAt: at.UTC()}
	if err := s.runs.StartRun(ctx, r); err != nil {
		s.log.Warn("run not recorded", "container", containerID, "cause", err.Error())
		return "", owner{}
	}
	s.mu.Lock()
	s.running++
	s.mu.Unlock()
	return r.ID, o
}

// endRun counts a recorded run's usage u (none: drop its record) for o,
// the container's owner found when it started, as its record names them:
// the container is not looked up again, so a lookup failing then cannot
// drop a command whose record the end deletes. With Deps.Buffer it is
// written at the next write, in one transaction with its record's removal.
func (s *Service) endRun(ctx context.Context, runID, containerID string, o owner, u Usage) {
	ctx = context.WithoutCancel(ctx)
	if u.Commands > 0 {
		u.OrgID, u.UserID, u.ContainerID, u.ThreadID = o.org, o.user, containerID, o.thread
		if u.Day == "" {
			u.Day = s.now().UTC().Format(DayLayout)
		}
	}
	e := Ended{RunID: runID, Usage: u}
	s.mu.Lock()
	s.running--
	if s.every > 0 {
		s.ended = append(s.ended, e)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if err := s.runs.EndRuns(ctx, []Ended{e}, nil); err != nil {
		s.log.Warn("usage not recorded", "org", u.OrgID, "user", u.UserID, "cause", err.Error())
	}
}

// Settle counts the runs of servers gone: every run not seen running for
// the stale period counts as one command whose wall time ran from its
// start until it was last seen. It returns how many it counted.
func (s *Service) Settle(ctx context.Context) (int, error) {
	if s.runs == nil {
		return 0, nil
	}
	stale, err := s.runs.StaleRuns(ctx, s.now().Add(-s.stale))
	if err != nil || len(stale) == 0 {
		return 0, err
	}
	ended := make([]Ended, len(stale))
	for i, r := range stale {
		ended[i] = Ended{RunID: r.ID, Usage: Usage{
			OrgID: r.OrgID, UserID: r.UserID, ContainerID: r.ContainerID, ThreadID: r.ThreadID,
			Day: r.SeenAt.UTC().Format(DayLayout), Counts: Counts{Commands: 1, Wall: max(r.SeenAt.Sub(r.StartedAt), 0)},
		}}
	}
	if err := s.runs.EndRuns(ctx, ended, nil); err != nil {
		return 0, fmt.Errorf("usage: settle: %w", err)
	}
	return len(ended), nil
}

// Sandbox records the sandbox time of the container since its last
// report: how long its sandbox ran and the CPU time its control group
// used. Failures are logged, never returned.
func (s *Service) Sandbox(ctx context.Context, containerID string, up, cpu time.Duration) {
	if up <= 0 && cpu <= 0 {
		return
	}
	s.forContainer(ctx, containerID, Usage{Counts: Counts{SandboxTime: up, SandboxCPU: cpu}})
}

// Tokens records the model tokens of one request of the user in the
// container containerID (empty when the request had none), or, when orgID
// or userID is empty, of the owner of that container. Failures are logged,
// never returned.
func (s *Service) Tokens(ctx context.Context, orgID, userID, containerID string, input, output int) {
	if input == 0 && output == 0 {
		return
	}
	u := Usage{OrgID: orgID, UserID: userID, Counts: Counts{InputTokens: int64(input), OutputTokens: int64(output)}}
	if orgID != "" && userID != "" && containerID == "" {
		s.record(ctx, u)
		return
	}
	s.forContainer(ctx, containerID, u)
}

// forContainer records u in the container (resolve).
func (s *Service) forContainer(ctx context.Context, containerID string, u Usage) {
	// A command that ended with its request still counts.
	ctx = context.WithoutCancel(ctx)
	if u, ok := s.resolve(ctx, containerID, u); ok {
		s.record(ctx, u)
	}
}

// resolve fills in whom u counts for in the container: its org and owner
// unless u names them, and its thread. A container that cannot be looked
// up drops usage naming nobody (false) and keeps the rest without the
// container.
func (s *Service) resolve(ctx context.Context, containerID string, u Usage) (Usage, bool) {
	named := u.OrgID != "" && u.UserID != ""
	if containerID == "" {
		return u, named
	}
	c, err := s.ownerOf(ctx, containerID)
	if err != nil {
		if !named {
			s.log.Warn("usage not recorded: container lookup", "container", containerID, "cause", err.Error())
		}
		return u, named
	}
	if !named {
		u.OrgID, u.UserID = c.org, c.user
	}
	if c.org == u.OrgID {
		u.ContainerID, u.ThreadID = containerID, c.thread
	}
	return u, true
}

func (s *Service) record(ctx context.Context, u Usage) {
	if s.every > 0 && u.OrgID != "" && u.UserID != "" {
		if u.Day == "" {
			u.Day = s.now().UTC().Format(DayLayout)
		}
		k := counter{u.OrgID, u.UserID, u.Day, u.ContainerID, u.ThreadID}
		s.mu.Lock()
		p := s.pending[k]
		p.OrgID, p.UserID, p.Day, p.ContainerID, p.ThreadID = u.OrgID, u.UserID, u.Day, u.ContainerID, u.ThreadID
		p.Counts.Add(u.Counts)
		s.pending[k] = p
		s.mu.Unlock()
		return
	}
	if err := s.Record(context.WithoutCancel(ctx), u); err != nil {
		s.log.Warn("usage not recorded", "org", u.OrgID, "user", u.UserID, "cause", err.Error())
	}
}

// Run writes the buffered sums every interval until ctx ends, then once
// more, and every hour forgets the keys of the writes older than a day;
// with Deps.Runs it also marks this server's running commands seen at
// each write, and settles the runs of servers gone every settle
// interval. It returns at once without Deps.Buffer.
func (s *Service) Run(ctx context.Context) {
	if s.every <= 0 {
		return
	}
	t := time.NewTicker(s.every)
	defer t.Stop()
	var settled, pruned time.Time
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := s.Flush(fctx); err != nil {
				s.log.Warn("usage not recorded", "cause", err.Error())
			}
			return
		case <-t.C:
			if err := s.Flush(ctx); err != nil {
				s.log.Warn("usage not recorded", "cause", err.Error())
			}
			s.see(ctx)
			if time.Since(pruned) >= time.Hour {
				pruned = time.Now()
				s.pruneKeys(ctx)
			}
			if s.runs != nil && time.Since(settled) >= s.settle {
				settled = time.Now()
				if n, err := s.Settle(ctx); err != nil {
					s.log.Warn("runs of servers gone not settled", "cause", err.Error())
				} else if n > 0 {
					s.log.Info("runs of servers gone settled", "runs", n)
				}
			}
		}
	}
}

// see marks this server's running commands seen now.
func (s *Service) see(ctx context.Context) {
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if s.runs == nil || running <= 0 {
		return
	}
	if err := s.runs.SeeRuns(ctx, s.holder, s.now().UTC()); err != nil {
		s.log.Warn("running commands not marked seen", "cause", err.Error())
	}
}

// Flush writes the buffered sums, each under a key of its own, and the
// ended runs with the removal of their records in the same transaction.
// What fails is sent again by the next flush as it was, under the same
// key: a write whose commit landed but whose answer was lost then adds
// nothing the second time (an ended run's record is gone already). It
// returns once a flush under way when it was called has written too, so
// that what was metered before it is in the store.
func (s *Service) Flush(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	batch, ended, sums := s.pending, s.ended, s.retry
	s.pending, s.ended, s.retry = map[counter]Usage{}, nil, nil
	s.mu.Unlock()
	for _, u := range batch {
		u.Key = id.New("usw")
		sums = append(sums, u)
	}
	failed := func(sums []Usage, ended []Ended) {
		s.mu.Lock()
		s.retry = append(sums, s.retry...)
		s.ended = append(ended, s.ended...)
		s.mu.Unlock()
	}
	if s.runs != nil && len(sums)+len(ended) > 0 {
		if err := s.runs.EndRuns(ctx, ended, sums); err != nil {
			failed(sums, ended)
			return fmt.Errorf("usage: flush: %w", err)
		}
		return nil
	}
	var errs []error
	var again []Usage
	for _, u := range sums {
		if err := s.store.AddUsage(ctx, u); err != nil {
			errs = append(errs, err)
			again = append(again, u)
		}
	}
	if len(errs) > 0 {
		failed(again, nil)
		return fmt.Errorf("usage: flush: %w", errors.Join(errs...))
	}
	return nil
}

// keyTTL is how long the store keeps the key of a write: long past the
// next flush, which sends a failed write again.
const keyTTL = 24 * time.Hour

// pruneKeys forgets the keys of the writes older than keyTTL.
func (s *Service) pruneKeys(ctx context.Context) {
	if err := s.store.PruneUsageKeys(ctx, s.now().Add(-keyTTL)); err != nil {
		s.log.Warn("usage write keys not pruned", "cause", err.Error())
	}
}

// Report sums the usage of the caller's org over the days from..to
// (inclusive, YYYY-MM-DD), grouped by day, user, container or thread. Only
// the org's admins may read it.
func (s *Service) Report(ctx context.Context, p user.Principal, from, to string, by GroupBy) ([]Row, error) {
	if !p.IsAdmin() {
		return nil, fault.New(fault.Forbidden, "only org admins can read the org's usage")
	}
	switch by {
	case ByDay, ByUser, ByContainer, ByThread:
	default:
		return nil, fault.Errorf(fault.Invalid, "group_by must be %q, %q, %q or %q", ByDay, ByUser, ByContainer, ByThread)
	}
	f, err := time.Parse(DayLayout, from)
	if err != nil {
		return nil, fault.New(fault.Invalid, "from must be a date, YYYY-MM-DD")
	}
	t, err := time.Parse(DayLayout, to)
	if err != nil {
		return nil, fault.New(fault.Invalid, "to must be a date, YYYY-MM-DD")
	}
	if t.Before(f) {
		return nil, fault.New(fault.Invalid, "to must not be before from")
	}
	if t.Sub(f) >= MaxDays*24*time.Hour {
		return nil, fault.Errorf(fault.Invalid, "a report covers at most %d days", MaxDays)
	}
	if s.every > 0 {
		if err := s.Flush(ctx); err != nil {
			s.log.Warn("usage not recorded before a report", "cause", err.Error())
		}
	}
	rows, err := s.store.UsageReport(ctx, p.OrgID, from, to, by)
	if err != nil {
		return nil, fmt.Errorf("usage: report: %w", err)
	}
	return rows, nil
}
