package usage

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// fakeStore records additions (their keys cleared, to compare them)
// and answers reports with rows.
type fakeStore struct {
	added    []Usage
	addErr   error
	rows     []Row
	reported []string // orgID, from, to, by of each report
	onReport func()   // called as a report reads, when set
	keys     []string // the keys of the writes, in order
	pruned   []time.Time
}

func (f *fakeStore) AddUsage(ctx context.Context, u Usage) error {
	f.keys = append(f.keys, u.Key)
	if f.addErr != nil {
		return f.addErr
	}
	u.Key = ""
	f.added = append(f.added, u)
	return nil
}

func (f *fakeStore) PruneUsageKeys(_ context.Context, t time.Time) error {
	f.pruned = append(f.pruned, t)
	return nil
}

func (f *fakeStore) UsageReport(ctx context.Context, orgID, from, to string, by GroupBy) ([]Row, error) {
	f.reported = append(f.reported, orgID, from, to, string(by))
	if f.onReport != nil {
		f.onReport()
	}
	return f.rows, nil
}

// fakeContainers knows two containers of org o1 owned by u1: c1, a user
// container, and c2, the container of thread t1.
type fakeContainers struct{}

func (fakeContainers) Container(ctx context.Context, id string) (container.Container, error) {
	switch id {
	case "c1":
		return container.Restore("c1", "cnt_1", "o1", "u1", "", container.Running, "docker", "h", time.Time{}, time.Time{}), nil
	case "c2":
		return container.Restore("c2", "t1", "o1", "u1", "t1", container.Running, "docker", "h", time.Time{}, time.Time{}), nil
	}
	return container.Container{}, fault.New(fault.NotFound, "no such container")
}

// newService meters into st with a fixed clock; edit, when given, changes
// its dependencies.
func newService(st *fakeStore, edit ...func(*Deps)) *Service {
	d := Deps{Store: st, Containers: fakeContainers{}, Now: func() time.Time { return time.Date(2026, 3, 1, 23, 30, 0, 0, time.FixedZone("X", -2*3600)) }}
	for _, f := range edit {
		f(&d)
	}
	return New(d)
}

// TestCommandAndTokens checks whom and which day usage counts for.
func TestCommandAndTokens(t *testing.T) {
	const day = "2026-03-02" // the clock's time in UTC
	tests := []struct {
		name   string
		record func(s *Service)
		want   []Usage
	}{
		{"command for the container's owner", func(s *Service) {
			s.Begin(context.Background(), "c1")(sandbox.Result{Duration: 3 * time.Second, CPUTime: 2 * time.Second}, nil)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Counts: Counts{Commands: 1, Wall: 3 * time.Second, CPU: 2 * time.Second}}}},
		{"sandbox time counts for the container's owner and thread", func(s *Service) {
			s.Sandbox(context.Background(), "c2", 30*time.Second, 1500*time.Millisecond)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", Counts: Counts{SandboxTime: 30 * time.Second, SandboxCPU: 1500 * time.Millisecond}}}},
		{"no sandbox time, nothing recorded", func(s *Service) {
			s.Sandbox(context.Background(), "c2", 0, 0)
		}, nil},
		{"command in a thread's container counts for the thread", func(s *Service) {
			s.Begin(context.Background(), "c2")(sandbox.Result{Duration: time.Second}, nil)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", Counts: Counts{Commands: 1, Wall: time.Second}}}},
		{"tokens of the user in a thread's container", func(s *Service) {
			s.Tokens(context.Background(), "o1", "u1", "c2", 10, 5)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", Counts: Counts{InputTokens: 10, OutputTokens: 5}}}},
		{"tokens of a user of another org are not put in the container", func(s *Service) {
			s.Tokens(context.Background(), "o2", "u2", "c2", 10, 5)
		}, []Usage{{OrgID: "o2", UserID: "u2", Day: day, Counts: Counts{InputTokens: 10, OutputTokens: 5}}}},
		{"tokens of the user in an unknown container still count for the user", func(s *Service) {
			s.Tokens(context.Background(), "o1", "u1", "gone", 3, 0)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, Counts: Counts{InputTokens: 3}}}},
		{"command in an unknown container is dropped", func(s *Service) {
			s.Begin(context.Background(), "nope")(sandbox.Result{Duration: time.Second}, nil)
		}, nil},
		{"tokens for the named user", func(s *Service) {
			s.Tokens(context.Background(), "o2", "u2", "", 10, 5)
		}, []Usage{{OrgID: "o2", UserID: "u2", Day: day, Counts: Counts{InputTokens: 10, OutputTokens: 5}}}},
		{"tokens for the container's owner", func(s *Service) {
			s.Tokens(context.Background(), "", "", "c1", 7, 0)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Counts: Counts{InputTokens: 7}}}},
		{"no tokens, nothing recorded", func(s *Service) {
			s.Tokens(context.Background(), "o2", "u2", "", 0, 0)
		}, nil},
		{"tokens of nobody are dropped", func(s *Service) {
			s.Tokens(context.Background(), "", "", "", 3, 3)
		}, nil},
		{"a cancelled request still counts", func(s *Service) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			s.Begin(ctx, "c1")(sandbox.Result{Duration: time.Second}, nil)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Counts: Counts{Commands: 1, Wall: time.Second}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStore{}
			tt.record(newService(st))
			if len(st.added) != len(tt.want) {
				t.Fatalf("added %+v, want %+v", st.added, tt.want)
			}
			for i := range tt.want {
				if st.added[i] != tt.want[i] {
					t.Fatalf("added %+v, want %+v", st.added[i], tt.want[i])
				}
			}
		})
	}
}

// TestRecordErrors checks that Record refuses usage of nobody and wraps
// the store's error.
func TestRecordErrors(t *testing.T) {
	boom := errors.New("boom")
	s := newService(&fakeStore{addErr: boom})
	if err := s.Record(context.Background(), Usage{OrgID: "o1"}); !fault.Is(err, fault.Invalid) {
		t.Fatalf("usage without a user: %v", err)
	}
	if err := s.Record(context.Background(), Usage{OrgID: "o1", UserID: "u1"}); !errors.Is(err, boom) {
		t.Fatalf("store failure: %v", err)
	}
}

// TestReport checks who may read a report and which spans it accepts.
func TestReport(t *testing.T) {
	admin := user.Principal{OrgID: "o1", UserID: "u1", Role: user.Admin}
	member := user.Principal{OrgID: "o1", UserID: "u2", Role: user.Member}
	tests := []struct {
		name     string
		p        user.Principal
		from, to string
		by       GroupBy
		fault    fault.Kind // "" for success
	}{
		{"admin by day", admin, "2026-03-01", "2026-03-31", ByDay, ""},
		{"admin by user, one day", admin, "2026-03-01", "2026-03-01", ByUser, ""},
		{"member", member, "2026-03-01", "2026-03-31", ByDay, fault.Forbidden},
		{"admin by container", admin, "2026-03-01", "2026-03-31", ByContainer, ""},
		{"admin by thread", admin, "2026-03-01", "2026-03-31", ByThread, ""},
		{"unknown grouping", admin, "2026-03-01", "2026-03-31", "project", fault.Invalid},
		{"bad from", admin, "March", "2026-03-31", ByDay, fault.Invalid},
		{"bad to", admin, "2026-03-01", "2026-3-31", ByDay, fault.Invalid},
		{"to before from", admin, "2026-03-02", "2026-03-01", ByDay, fault.Invalid},
		{"span too long", admin, "2024-01-01", "2026-03-01", ByDay, fault.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStore{rows: []Row{{Day: "2026-03-01", Counts: Counts{Commands: 2}}}}
			rows, err := newService(st).Report(context.Background(), tt.p, tt.from, tt.to, tt.by)
			if tt.fault != "" {
				if !fault.Is(err, tt.fault) || len(st.reported) != 0 {
					t.Fatalf("want %s and no store query, got %v (queried %v)", tt.fault, err, st.reported)
				}
				return
			}
			if err != nil || len(rows) != 1 || rows[0].Commands != 2 {
				t.Fatalf("report: %+v %v", rows, err)
			}
			if want := []string{"o1", tt.from, tt.to, string(tt.by)}; len(st.reported) != 4 || st.reported[0] != want[0] || st.reported[1] != want[1] || st.reported[2] != want[2] || st.reported[3] != want[3] {
				t.Fatalf("store asked %v, want %v", st.reported, want)
			}
		})
	}
}

// TestBufferedUsage: with Deps.Buffer, the metering of requests and commands
// adds up in memory, one write per counter; a report writes the pending
// sums first, a failed write stays pending, and Run writes what is left
// when it ends.
func TestBufferedUsage(t *testing.T) {
	ctx := context.Background()
	st := &fakeStore{}
	s := newService(st, func(d *Deps) { d.Buffer = time.Hour })
	s.Tokens(ctx, "o1", "u1", "", 10, 5)
	s.Tokens(ctx, "o1", "u1", "", 1, 2)
	s.Begin(ctx, "c1")(sandbox.Result{Duration: 3 * time.Second, CPUTime: 2 * time.Second}, nil)
	s.Begin(ctx, "c2")(sandbox.Result{Duration: time.Second}, nil)
	s.Tokens(ctx, "o1", "u1", "c2", 6, 1)
	s.Sandbox(ctx, "c2", 30*time.Second, 500*time.Millisecond)
	s.Sandbox(ctx, "c2", 30*time.Second, 250*time.Millisecond)
	s.Tokens(ctx, "o2", "u2", "", 4, 0)
	if len(st.added) != 0 {
		t.Fatalf("written at once: %+v", st.added)
	}
	admin := user.Principal{OrgID: "o1", UserID: "u1", Role: user.Admin}
	if _, err := s.Report(ctx, admin, "2026-03-01", "2026-03-31", ByDay); err != nil {
		t.Fatal(err)
	}
	got := map[string]Usage{}
	for _, u := range st.added {
		got[u.OrgID+"/"+u.ContainerID] = u
	}
	const day = "2026-03-02"
	want := map[string]Usage{
		"o1/":   {OrgID: "o1", UserID: "u1", Day: day, Counts: Counts{InputTokens: 11, OutputTokens: 7}},
		"o1/c1": {OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Counts: Counts{Commands: 1, Wall: 3 * time.Second, CPU: 2 * time.Second}},
		"o1/c2": {OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", Counts: Counts{Commands: 1, Wall: time.Second,
			InputTokens: 6, OutputTokens: 1, SandboxTime: time.Minute, SandboxCPU: 750 * time.Millisecond}},
		"o2/": {OrgID: "o2", UserID: "u2", Day: day, Counts: Counts{InputTokens: 4}},
	}
	if len(st.added) != len(want) {
		t.Fatalf("after the report: %+v, want one sum per counter: %+v", st.added, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("counter %s: %+v, want %+v", k, got[k], w)
		}
	}
	st.added = nil
	st.addErr = errors.New("database down")
	s.Tokens(ctx, "o1", "u1", "", 1, 1)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("a failed write was not reported")
	}
	st.addErr = nil
	rctx, cancel := context.WithCancel(ctx)
	cancel()
	s.Run(rctx)
	if len(st.added) != 1 || st.added[0].InputTokens != 1 {
		t.Fatalf("Run's last write: %+v, want the sum kept from the failed flush", st.added)
	}
}

// TestCommandEndings: a command counts however it ended, with its wall
// time from its result or, cut short without one, from its start; one
// that never started counts nothing, and only the first end counts.
func TestCommandEndings(t *testing.T) {
	const day = "2026-03-02"
	c1 := func(wall, cpu time.Duration) []Usage {
		return []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Counts: Counts{Commands: 1, Wall: wall, CPU: cpu}}}
	}
	tests := []struct {
		name string
		res  sandbox.Result
		err  error
		want []Usage
	}{
		{"finished", sandbox.Result{Duration: 3 * time.Second, CPUTime: time.Second}, nil, c1(3*time.Second, time.Second)},
		{"stopped by its user", sandbox.Result{}, context.Canceled, c1(8*time.Second, 0)},
		{"its sandbox died under it", sandbox.Result{CPUTime: 2 * time.Second}, sandbox.ErrUnavailable, c1(8*time.Second, 2*time.Second)},
		{"timed out", sandbox.Result{Duration: 5 * time.Second, TimedOut: true}, nil, c1(5*time.Second, 0)},
		{"never started", sandbox.Result{}, sandbox.NotStarted(errors.New("no image")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStore{}
			now := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
			s := newService(st, func(d *Deps) { d.Now = func() time.Time { return now } })
			end := s.Begin(context.Background(), "c1")
			now = now.Add(8 * time.Second)
			end(tt.res, tt.err)
			end(tt.res, tt.err) // counted once
			if len(st.added) != len(tt.want) || (len(tt.want) == 1 && st.added[0] != tt.want[0]) {
				t.Fatalf("added %+v, want %+v", st.added, tt.want)
			}
		})
	}
}

// fakeRuns keeps run records in memory; EndRuns is one transaction.
type fakeRuns struct {
	mu    sync.Mutex
	runs  map[string]Run
	added []Usage
	err   error
	seen  []string // holders marked seen
}

func (f *fakeRuns) StartRun(_ context.Context, r Run) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[string]Run{}
	}
	f.runs[r.ID] = r
	return nil
}

func (f *fakeRuns) SeeRuns(_ context.Context, holder string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, holder)
	for id, r := range f.runs {
		if r.Holder == holder {
			r.SeenAt = at
			f.runs[id] = r
		}
	}
	return nil
}

func (f *fakeRuns) StaleRuns(_ context.Context, before time.Time) ([]Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Run
	for _, r := range f.runs {
		if r.SeenAt.Before(before) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeRuns) EndRuns(_ context.Context, ended []Ended, sums []Usage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	for _, e := range ended {
		if _, ok := f.runs[e.RunID]; !ok {
			continue // settled elsewhere
		}
		delete(f.runs, e.RunID)
		if e.Usage.Commands > 0 {
			f.added = append(f.added, e.Usage)
		}
	}
	for _, u := range sums {
		u.Key = ""
		f.added = append(f.added, u)
	}
	return nil
}

// TestTrackedRuns: with Deps.Runs every command is recorded when it
// starts; its end is written with the record's removal at the next flush
// (kept for the flush after when that fails); a command whose record
// another server settled meanwhile adds nothing; the runs of a server not
// seen for the stale period count one command each, their wall time up to
// when they were last seen, on that day.
func TestTrackedRuns(t *testing.T) {
	ctx := context.Background()
	runs := &fakeRuns{}
	now := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
	s := newService(&fakeStore{}, func(d *Deps) {
		d.Now = func() time.Time { return now }
		d.Buffer = time.Hour
		d.Runs, d.Holder, d.Settle, d.Stale = runs, "srv-a", time.Minute, 20*time.Second
	})

	end := s.Begin(ctx, "c2")
	if len(runs.runs) != 1 {
		t.Fatalf("runs recorded %+v", runs.runs)
	}
	s.see(ctx)
	now = now.Add(8 * time.Second)
	end(sandbox.Result{}, context.Canceled)
	s.see(ctx) // nothing runs: no write
	if len(runs.seen) != 1 || runs.seen[0] != "srv-a" {
		t.Fatalf("marked seen %v", runs.seen)
	}
	runs.err = errors.New("database down")
	if err := s.Flush(ctx); err == nil || len(runs.runs) != 1 {
		t.Fatalf("a failed flush: %v, records %+v", err, runs.runs)
	}
	runs.err = nil
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := Usage{OrgID: "o1", UserID: "u1", Day: "2026-03-02", ContainerID: "c2", ThreadID: "t1", Counts: Counts{Commands: 1, Wall: 8 * time.Second}}
	if len(runs.runs) != 0 || len(runs.added) != 1 || runs.added[0] != want {
		t.Fatalf("after the flush: records %+v, added %+v", runs.runs, runs.added)
	}

	// Settled by another server before this one wrote its end: counted
	// once, by the settling.
	runs.added = nil
	end = s.Begin(ctx, "c1")
	for id := range runs.runs {
		delete(runs.runs, id)
	}
	end(sandbox.Result{Duration: time.Second}, nil)
	if err := s.Flush(ctx); err != nil || len(runs.added) != 0 {
		t.Fatalf("a run settled elsewhere added %+v (%v)", runs.added, err)
	}

	// A server that died: its run was last seen 30 s after it started,
	// just before midnight, and is stale now.
	start := time.Date(2026, 3, 2, 23, 59, 50, 0, time.UTC)
	_ = runs.StartRun(ctx, Run{ID: "run_dead", OrgID: "o1", UserID: "u1", ContainerID: "c1", Holder: "srv-b", StartedAt: start, SeenAt: start.Add(30 * time.Second)})
	_ = runs.StartRun(ctx, Run{ID: "run_live", OrgID: "o1", UserID: "u1", ContainerID: "c1", Holder: "srv-c", StartedAt: start, SeenAt: start.Add(time.Minute)})
	now = start.Add(65 * time.Second)
	n, err := s.Settle(ctx)
	if err != nil || n != 1 {
		t.Fatalf("settled %d: %v", n, err)
	}
	settled := Usage{OrgID: "o1", UserID: "u1", Day: "2026-03-03", ContainerID: "c1", Counts: Counts{Commands: 1, Wall: 30 * time.Second}}
	if _, ok := runs.runs["run_live"]; !ok || len(runs.added) != 1 || runs.added[0] != settled {
		t.Fatalf("settled %+v, records left %+v", runs.added, runs.runs)
	}
}

// gatedRuns is fakeRuns whose EndRuns, once entered (entered closes),
// waits for release.
type gatedRuns struct {
	*fakeRuns
	entered, release chan struct{}
}

func (g *gatedRuns) EndRuns(ctx context.Context, ended []Ended, sums []Usage) error {
	close(g.entered)
	<-g.release
	return g.fakeRuns.EndRuns(ctx, ended, sums)
}

// TestReportWaitsForFlushUnderWay: a report reads the store only after a
// flush under way (the periodic one) has written what it took from the
// buffer: a command that ended before the report is in it.
func TestReportWaitsForFlushUnderWay(t *testing.T) {
	ctx := context.Background()
	runs := &gatedRuns{fakeRuns: &fakeRuns{}, entered: make(chan struct{}), release: make(chan struct{})}
	written := -1
	st := &fakeStore{}
	st.onReport = func() {
		runs.mu.Lock()
		written = len(runs.added)
		runs.mu.Unlock()
	}
	s := newService(st, func(d *Deps) { d.Buffer = time.Hour; d.Runs = runs; d.Holder = "h" })
	s.Begin(ctx, "c1")(sandbox.Result{Duration: time.Second}, nil)
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	<-runs.entered
	reported := make(chan error, 1)
	admin := user.Principal{OrgID: "o1", UserID: "u1", Role: user.Admin}
	go func() {
		_, err := s.Report(ctx, admin, "2026-03-01", "2026-03-31", ByDay)
		reported <- err
	}()
	select {
	case <-reported:
		t.Fatal("the report read the store while a flush was writing what it took")
	case <-time.After(200 * time.Millisecond):
	}
	close(runs.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-reported; err != nil {
		t.Fatal(err)
	}
	if written != 1 {
		t.Fatalf("the report read %d written usages, want the command's", written)
	}
}

// downContainers is fakeContainers until down is set, then fails every
// lookup, as a database that went away does.
type downContainers struct{ down *bool }

func (d downContainers) Container(ctx context.Context, id string) (container.Container, error) {
	if *d.down {
		return container.Container{}, errors.New("database down")
	}
	return fakeContainers{}.Container(ctx, id)
}

// TestRunEndsWithoutALookup: a tracked command counts for the owner its
// start found, even when the container cannot be looked up at its end
// (the remembered containers started over, the database is down), since
// its end deletes the record a settling would have counted.
func TestRunEndsWithoutALookup(t *testing.T) {
	ctx := context.Background()
	runs := &fakeRuns{}
	down := false
	now := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
	s := newService(&fakeStore{}, func(d *Deps) {
		d.Now = func() time.Time { return now }
		d.Containers = downContainers{&down}
		d.Buffer = time.Hour
		d.Runs, d.Holder, d.Settle, d.Stale = runs, "srv-a", time.Minute, 20*time.Second
	})
	end := s.Begin(ctx, "c2")
	s.mu.Lock()
	s.owners = nil
	s.mu.Unlock()
	down = true
	end(sandbox.Result{Duration: 3 * time.Second}, nil)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := Usage{OrgID: "o1", UserID: "u1", Day: "2026-03-02", ContainerID: "c2", ThreadID: "t1", Counts: Counts{Commands: 1, Wall: 3 * time.Second}}
	if len(runs.runs) != 0 || len(runs.added) != 1 || runs.added[0] != want {
		t.Fatalf("records %+v, added %+v, want %+v", runs.runs, runs.added, want)
	}
}

// lostReplies is a store whose writes land but whose answer is lost the
// first lose times, as when the connection drops during a commit; like
// the database, it adds a keyed write once.
type lostReplies struct {
	fakeStore
	lose    int
	written map[string]bool
}

func (l *lostReplies) AddUsage(ctx context.Context, u Usage) error {
	if u.Key != "" && l.written[u.Key] {
		l.keys = append(l.keys, u.Key)
		return nil
	}
	if l.written == nil {
		l.written = map[string]bool{}
	}
	l.written[u.Key] = true
	_ = l.fakeStore.AddUsage(ctx, u)
	if l.lose > 0 {
		l.lose--
		return errors.New("connection reset during commit")
	}
	return nil
}

// lostRunReplies is fakeRuns whose first lose transactions commit but
// answer an error.
type lostRunReplies struct {
	fakeRuns
	lose    int
	written map[string]bool
}

func (l *lostRunReplies) EndRuns(ctx context.Context, ended []Ended, sums []Usage) error {
	if l.written == nil {
		l.written = map[string]bool{}
	}
	var fresh []Usage
	for _, u := range sums {
		if !l.written[u.Key] {
			l.written[u.Key] = true
			fresh = append(fresh, u)
		}
	}
	_ = l.fakeRuns.EndRuns(ctx, ended, fresh)
	if l.lose > 0 {
		l.lose--
		return errors.New("connection reset during commit")
	}
	return nil
}

// TestFlushLostReplyCountsOnce: a flush whose write landed but whose
// answer was lost sends the same sums again under the same keys, apart
// from what was metered since, so each counts once; with tracked runs
// too, where the sums go with the runs' ends in one transaction.
func TestFlushLostReplyCountsOnce(t *testing.T) {
	ctx := context.Background()
	total := func(added []Usage) (n int64) {
		for _, u := range added {
			n += u.InputTokens
		}
		return n
	}
	st := &lostReplies{lose: 1}
	s := newService(&st.fakeStore, func(d *Deps) { d.Buffer, d.Store = time.Hour, st })
	s.Tokens(ctx, "o1", "u1", "", 10, 0)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("a write whose answer was lost was not reported")
	}
	s.Tokens(ctx, "o1", "u1", "", 1, 0)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := total(st.added); got != 11 {
		t.Fatalf("%d tokens counted, want the 11 metered", got)
	}
	if len(st.keys) != 3 || st.keys[0] == "" || st.keys[1] != st.keys[0] || st.keys[2] == st.keys[0] {
		t.Fatalf("write keys %q, want the failed sum's sent again and the new sum's its own", st.keys)
	}

	runs := &lostRunReplies{lose: 1}
	s = newService(&fakeStore{}, func(d *Deps) {
		d.Buffer, d.Runs, d.Holder, d.Settle, d.Stale = time.Hour, runs, "srv-a", time.Minute, time.Minute
	})
	s.Tokens(ctx, "o1", "u1", "", 10, 0)
	if err := s.Flush(ctx); err == nil {
		t.Fatal("a transaction whose answer was lost was not reported")
	}
	s.Tokens(ctx, "o1", "u1", "", 1, 0)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := total(runs.added); got != 11 {
		t.Fatalf("with tracked runs, %d tokens counted, want the 11 metered", got)
	}
}
