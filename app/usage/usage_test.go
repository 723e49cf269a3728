package usage

import (
	"context"
	"errors"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
	"threadbox/domain/user"
)

// fakeStore records additions and answers reports with rows.
type fakeStore struct {
	added    []Usage
	addErr   error
	rows     []Row
	reported []string // orgID, from, to, by of each report
}

func (f *fakeStore) AddUsage(ctx context.Context, u Usage) error {
	if f.addErr != nil {
		return f.addErr
	}
	f.added = append(f.added, u)
	return nil
}

func (f *fakeStore) UsageReport(ctx context.Context, orgID, from, to string, by GroupBy) ([]Row, error) {
	f.reported = append(f.reported, orgID, from, to, string(by))
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

func newService(st *fakeStore) *Service {
	s := New(st, fakeContainers{}, nil)
	s.SetClock(func() time.Time { return time.Date(2026, 3, 1, 23, 30, 0, 0, time.FixedZone("X", -2*3600)) })
	return s
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
			s.Command(context.Background(), "c1", sandbox.Result{Duration: 3 * time.Second, CPUTime: 2 * time.Second})
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Commands: 1, Wall: 3 * time.Second, CPU: 2 * time.Second}}},
		{"sandbox time counts for the container's owner and thread", func(s *Service) {
			s.Sandbox(context.Background(), "c2", 30*time.Second, 1500*time.Millisecond)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", SandboxTime: 30 * time.Second, SandboxCPU: 1500 * time.Millisecond}}},
		{"no sandbox time, nothing recorded", func(s *Service) {
			s.Sandbox(context.Background(), "c2", 0, 0)
		}, nil},
		{"command in a thread's container counts for the thread", func(s *Service) {
			s.Command(context.Background(), "c2", sandbox.Result{Duration: time.Second})
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", Commands: 1, Wall: time.Second}}},
		{"tokens of the user in a thread's container", func(s *Service) {
			s.Tokens(context.Background(), "o1", "u1", "c2", 10, 5)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c2", ThreadID: "t1", InputTokens: 10, OutputTokens: 5}}},
		{"tokens of a user of another org are not put in the container", func(s *Service) {
			s.Tokens(context.Background(), "o2", "u2", "c2", 10, 5)
		}, []Usage{{OrgID: "o2", UserID: "u2", Day: day, InputTokens: 10, OutputTokens: 5}}},
		{"tokens of the user in an unknown container still count for the user", func(s *Service) {
			s.Tokens(context.Background(), "o1", "u1", "gone", 3, 0)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, InputTokens: 3}}},
		{"command in an unknown container is dropped", func(s *Service) {
			s.Command(context.Background(), "nope", sandbox.Result{Duration: time.Second})
		}, nil},
		{"tokens for the named user", func(s *Service) {
			s.Tokens(context.Background(), "o2", "u2", "", 10, 5)
		}, []Usage{{OrgID: "o2", UserID: "u2", Day: day, InputTokens: 10, OutputTokens: 5}}},
		{"tokens for the container's owner", func(s *Service) {
			s.Tokens(context.Background(), "", "", "c1", 7, 0)
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", InputTokens: 7}}},
		{"no tokens, nothing recorded", func(s *Service) {
			s.Tokens(context.Background(), "o2", "u2", "", 0, 0)
		}, nil},
		{"tokens of nobody are dropped", func(s *Service) {
			s.Tokens(context.Background(), "", "", "", 3, 3)
		}, nil},
		{"a cancelled request still counts", func(s *Service) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			s.Command(ctx, "c1", sandbox.Result{Duration: time.Second})
		}, []Usage{{OrgID: "o1", UserID: "u1", Day: day, ContainerID: "c1", Commands: 1, Wall: time.Second}}},
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
			st := &fakeStore{rows: []Row{{Day: "2026-03-01", Commands: 2}}}
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
