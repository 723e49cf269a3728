// Package quota enforces the resource quotas of the org policy: running
// sandboxes per user and per org, containers per user and storage bytes per
// org. The container manager calls BeforeCreate and Reserve; the
// requests that may boot a sandbox call BeforeRun before they create
// anything; uploads, artifact saving, forks, skill uploads, chat turns,
// rewinds, reverts and requests that run code ask StorageLeft or
// BeforeStore before they write. Each refusal names its quota (org.Quotas.Admit).
package quota

import (
	"context"
	"fmt"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/org"
)

// Store reads the counts the quotas bound (infra/store.Quota).
type Store interface {
	// RunningSandboxes counts the containers recorded with a running
	// sandbox: the user's in the org, or the org's when userID is "".
	RunningSandboxes(ctx context.Context, orgID, userID string) (int64, error)
	// UserContainers counts the containers the user owns in the org.
	UserContainers(ctx context.Context, orgID, userID string) (int64, error)
	// OrgContainerIDs lists the storage ids of the org's containers.
	OrgContainerIDs(ctx context.Context, orgID string) ([]string, error)
	// ArtifactBytes sums the sizes of the org's artifact versions.
	ArtifactBytes(ctx context.Context, orgID string) (int64, error)
	// MessageBytes sums the bytes the org's thread messages store.
	MessageBytes(ctx context.Context, orgID string) (int64, error)
	// TurnLogBytes sums the bytes the event logs of the org's turns store.
	TurnLogBytes(ctx context.Context, orgID string) (int64, error)
	// SkillBytes sums the bytes of the files of the org's skill versions.
	SkillBytes(ctx context.Context, orgID string) (int64, error)
	// CheckpointBytes sums the archive sizes of the checkpoints of the
	// org's containers' sandboxes.
	CheckpointBytes(ctx context.Context, orgID string) (int64, error)
	// RetainedFileBytes sums the sizes of the output files the org keeps
	// after their containers were removed at their maximum age.
	RetainedFileBytes(ctx context.Context, orgID string) (int64, error)
	// SnapshotBytes sums what the files snapshots of the org's threads
	// store (files unchanged between two snapshots counted once).
	SnapshotBytes(ctx context.Context, orgID string) (int64, error)
	// ReserveRunning saves c, a container about to boot recorded as
	// running, when admit accepts the running containers of its owner and
	// of its org (c not among them), counted in the same step, which no
	// other reservation for the org interleaves with (on any server of
	// the database).
	ReserveRunning(ctx context.Context, c container.Container, admit func(user, org int64) error) error
}

// Containers looks a container up by its storage id.
type Containers interface {
	Container(ctx context.Context, id string) (container.Container, error)
}

// Disks measures the bytes a container's files use on the host
// (infra/sandbox/hostdirs.Layout).
type Disks interface {
	Usage(ctx context.Context, containerID string) (int64, error)
}

// Policies returns an org's policy (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Service checks the quotas. The running-sandbox quotas are held at every
// boot by Reserve, atomically; the other checks count what is recorded
// when they run, so two creations (or uploads) racing for the last slot
// may both pass: those quotas bound steady use, not a burst of
// simultaneous requests.
type Service struct {
	store      Store
	containers Containers
	disks      Disks
	policies   Policies
}

// New returns the quota checks over the counts in store and the container
// records; disks may be nil (container files then count nothing toward
// the storage quota).
func New(store Store, containers Containers, disks Disks, policies Policies) *Service {
	return &Service{store: store, containers: containers, disks: disks, policies: policies}
}

func (s *Service) quotas(ctx context.Context, orgID string) (org.Quotas, error) {
	p, err := s.policies.OrgPolicy(ctx, orgID)
	if err != nil {
		return org.Quotas{}, fmt.Errorf("quota: policy: %w", err)
	}
	return p.Quotas(), nil
}

// BeforeCreate refuses (fault.Forbidden, naming containersPerUser) a new
// container for a user who owns as many as the org allows. The container
// manager calls it just before it records a new container.
func (s *Service) BeforeCreate(ctx context.Context, orgID, userID string) error {
	q, err := s.quotas(ctx, orgID)
	if err != nil || q.Limit(org.ContainersPerUser) == 0 {
		return err
	}
	n, err := s.store.UserContainers(ctx, orgID, userID)
	if err != nil {
		return fmt.Errorf("quota: count containers: %w", err)
	}
	return q.Admit(org.ContainersPerUser, n)
}

// Reserve takes the running-sandbox slot of c, a container whose sandbox
// is about to boot (c.Booting: recorded as running, held by the booting
// server): the running sandboxes of its owner and of its org are counted
// and c recorded as running in one step that no other reservation for the
// org interleaves with, in this server or another on the database, so N
// boots racing for the last slot admit exactly one. A refusal is
// fault.RateLimited naming the quota, and records nothing. The container
// manager calls it just before it boots the sandbox, and records the
// container stopped again when the boot fails (a server that dies
// meanwhile leaves a record its sweep, or another server's, sets idle).
// Without a running-sandbox quota nothing is counted or recorded here.
func (s *Service) Reserve(ctx context.Context, c container.Container) error {
	q, err := s.quotas(ctx, c.OrgID())
	if err != nil {
		return err
	}
	if q.Limit(org.RunningSandboxesPerUser) == 0 && q.Limit(org.RunningSandboxesPerOrg) == 0 {
		return nil
	}
	err = s.store.ReserveRunning(ctx, c, func(user, all int64) error {
		if err := q.Admit(org.RunningSandboxesPerUser, user); err != nil {
			return err
		}
		return q.Admit(org.RunningSandboxesPerOrg, all)
	})
	if err != nil && !fault.Is(err, fault.RateLimited) {
		return fmt.Errorf("quota: reserve a running sandbox: %w", err)
	}
	return err
}

// BeforeBoot refuses (fault.RateLimited, naming the quota) booting one more
// sandbox for a user of the org when the user, or the org, has as many
// running as the policy allows, counting what is recorded now. Requests
// call it (through BeforeRun) to refuse early, before they make anything;
// the boot itself takes its slot with Reserve.
func (s *Service) BeforeBoot(ctx context.Context, orgID, userID string) error {
	q, err := s.quotas(ctx, orgID)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		quota org.Quota
		user  string
	}{{org.RunningSandboxesPerUser, userID}, {org.RunningSandboxesPerOrg, ""}} {
		if q.Limit(c.quota) == 0 {
			continue
		}
		n, err := s.store.RunningSandboxes(ctx, orgID, c.user)
		if err != nil {
			return fmt.Errorf("quota: count running sandboxes: %w", err)
		}
		if err := q.Admit(c.quota, n); err != nil {
			return err
		}
	}
	return nil
}

// BeforeRun is BeforeBoot for a request that may run code in the
// container with storage id containerID ("" or an unknown id when the
// request would create it): nothing is refused while that container's
// sandbox runs. Requests call it before they create or store anything, so
// a refused one leaves nothing behind.
func (s *Service) BeforeRun(ctx context.Context, orgID, userID, containerID string) error {
	if containerID != "" {
		// The recorded state: a cheap lookup on the request path, where
		// the sandbox usually runs already.
		if c, err := s.containers.Container(ctx, containerID); err == nil && c.State() == container.Running {
			return nil
		}
	}
	return s.BeforeBoot(ctx, orgID, userID)
}

// StorageUsed returns the bytes the org stores: its artifacts, its
// threads' messages, its turns' event logs, its skills, the checkpoints of
// its sandboxes (compressed, as stored), the output files kept after their
// containers were removed, its threads' files snapshots, and the files of
// its containers as the host measures them (whoever wrote them: uploads,
// forks or code in the sandbox).
func (s *Service) StorageUsed(ctx context.Context, orgID string) (int64, error) {
	var total int64
	for _, c := range []struct {
		what  string
		count func(context.Context, string) (int64, error)
	}{
		{"artifact bytes", s.store.ArtifactBytes},
		{"message bytes", s.store.MessageBytes},
		{"turn log bytes", s.store.TurnLogBytes},
		{"skill bytes", s.store.SkillBytes},
		{"checkpoint bytes", s.store.CheckpointBytes},
		{"retained file bytes", s.store.RetainedFileBytes},
		{"snapshot bytes", s.store.SnapshotBytes},
	} {
		n, err := c.count(ctx, orgID)
		if err != nil {
			return 0, fmt.Errorf("quota: %s: %w", c.what, err)
		}
		total += n
	}
	if s.disks == nil {
		return total, nil
	}
	ids, err := s.store.OrgContainerIDs(ctx, orgID)
	if err != nil {
		return 0, fmt.Errorf("quota: containers: %w", err)
	}
	for _, id := range ids {
		n, err := s.disks.Usage(ctx, id)
		if err != nil {
			return 0, fmt.Errorf("quota: disk usage of %s: %w", id, err)
		}
		total += n
	}
	return total, nil
}

// StorageLeft returns how many more bytes the org may store, or -1 when it
// has no storage quota. An org with nothing left is refused
// (fault.TooLarge, naming storageBytesPerOrg). Uploads, whose size is not
// known before they arrive, call it before writing and cap the write at
// the answer.
func (s *Service) StorageLeft(ctx context.Context, orgID string) (int64, error) {
	q, err := s.quotas(ctx, orgID)
	if err != nil || q.Limit(org.StorageBytesPerOrg) == 0 {
		return -1, err
	}
	used, err := s.StorageUsed(ctx, orgID)
	if err != nil {
		return 0, err
	}
	left := q.BytesLeft(used)
	if left == 0 {
		return 0, org.StorageExceeded(q.Limit(org.StorageBytesPerOrg), used, 0)
	}
	return left, nil
}

// BeforeStore refuses (fault.TooLarge, naming storageBytesPerOrg) storing
// n more bytes that would take the org past its storage quota; with n
// zero (what will be stored is not known yet) it refuses an org with
// nothing left. A fork calls it with the bytes it will copy, a chat turn
// with its user message, a skill upload with its files, a rewind or a
// revert with what it adds to the container's files, a request that runs
// code with zero.
func (s *Service) BeforeStore(ctx context.Context, orgID string, n int64) error {
	q, err := s.quotas(ctx, orgID)
	if err != nil || q.Limit(org.StorageBytesPerOrg) == 0 {
		return err
	}
	used, err := s.StorageUsed(ctx, orgID)
	if err != nil {
		return err
	}
	if n == 0 && q.BytesLeft(used) == 0 {
		return org.StorageExceeded(q.Limit(org.StorageBytesPerOrg), used, 0)
	}
	return q.AdmitBytes(used, n)
}
