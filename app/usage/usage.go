// Package usage meters what users spend: the commands they run in sandboxes
// (count, wall time and CPU time), the time their sandboxes run (and the CPU
// time those use) and the model tokens of their requests,
// added to durable counters per org, user, container, thread and UTC day,
// and reported to the org's admins.
package usage

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
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
	Day          string
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
	Day          string
	UserID       string
	Email        string
	ContainerID  string
	ClientID     string
	ThreadID     string
	Title        string
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

// Store keeps the daily counters.
type Store interface {
	// AddUsage adds u to the counters of (u.OrgID, u.UserID, u.Day,
	// u.ContainerID, u.ThreadID), creating them at zero first.
	AddUsage(ctx context.Context, u Usage) error
	// UsageReport sums the org's counters of the days from..to (inclusive,
	// YYYY-MM-DD) grouped by day, user, container or thread, ordered by the
	// grouping's key.
	UsageReport(ctx context.Context, orgID, from, to string, by GroupBy) ([]Row, error)
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
}

// New returns a Service over the counters and the container records; a nil
// log discards the failures of recording.
func New(store Store, containers Containers, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, containers: containers, now: time.Now, log: log}
}

// SetClock replaces the clock (tests).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

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

// Command records one command that ran in the container: its wall time
// and CPU time count for the container's org and owner. Failures are
// logged, never returned: metering never fails a command.
func (s *Service) Command(ctx context.Context, containerID string, res sandbox.Result) {
	s.forContainer(ctx, containerID, Usage{Commands: 1, Wall: res.Duration, CPU: res.CPUTime})
}

// Sandbox records the sandbox time of the container since its last
// report: how long its sandbox ran and the CPU time its control group
// used. Failures are logged, never returned.
func (s *Service) Sandbox(ctx context.Context, containerID string, up, cpu time.Duration) {
	if up <= 0 && cpu <= 0 {
		return
	}
	s.forContainer(ctx, containerID, Usage{SandboxTime: up, SandboxCPU: cpu})
}

// Tokens records the model tokens of one request of the user in the
// container containerID (empty when the request had none), or, when orgID
// or userID is empty, of the owner of that container. Failures are logged,
// never returned.
func (s *Service) Tokens(ctx context.Context, orgID, userID, containerID string, input, output int) {
	if input == 0 && output == 0 {
		return
	}
	u := Usage{OrgID: orgID, UserID: userID, InputTokens: int64(input), OutputTokens: int64(output)}
	if orgID != "" && userID != "" && containerID == "" {
		s.record(ctx, u)
		return
	}
	s.forContainer(ctx, containerID, u)
}

// forContainer records u in the container: for its org and owner unless u
// names them, and in its thread. A container that cannot be looked up
// drops usage naming nobody and records the rest without the container.
func (s *Service) forContainer(ctx context.Context, containerID string, u Usage) {
	// A command that ended with its request still counts.
	ctx = context.WithoutCancel(ctx)
	named := u.OrgID != "" && u.UserID != ""
	if containerID == "" {
		if named {
			s.record(ctx, u)
		}
		return
	}
	c, err := s.containers.Container(ctx, containerID)
	if err != nil {
		if named {
			s.record(ctx, u)
			return
		}
		s.log.Warn("usage not recorded: container lookup", "container", containerID, "cause", err.Error())
		return
	}
	if !named {
		u.OrgID, u.UserID = c.OrgID(), c.OwnerID()
	}
	if c.OrgID() == u.OrgID {
		u.ContainerID, u.ThreadID = c.ID(), c.ThreadID()
	}
	s.record(ctx, u)
}

func (s *Service) record(ctx context.Context, u Usage) {
	if err := s.Record(context.WithoutCancel(ctx), u); err != nil {
		s.log.Warn("usage not recorded", "org", u.OrgID, "user", u.UserID, "cause", err.Error())
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
	rows, err := s.store.UsageReport(ctx, p.OrgID, from, to, by)
	if err != nil {
		return nil, fmt.Errorf("usage: report: %w", err)
	}
	return rows, nil
}
