// Package workspace holds the chat workspace use cases (docs/api.md):
// projects and threads, the thread's files, the chat turn with its
// code-execution injection rules and skills, artifact capture, and the
// thread lifecycle (fork, delete).
package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"threadbox/domain/audit"
	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/project"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

type projectStore interface {
	project.Repository
}

type threadStore interface {
	thread.Repository
	thread.MessageRepository
	// OrgThread returns the org's thread with id, whoever owns it.
	OrgThread(ctx context.Context, orgID, id string) (thread.Thread, error)
}

// Service is the workspace use cases.
type Service struct {
	store     Store
	artifacts Artifacts
	d         Deps
	now       func() time.Time
	log       *slog.Logger

	mu   sync.Mutex
	seen map[string]map[string]stamp // per thread: outputs already captured
	busy map[string]bool             // threads a turn or a rewind of this process holds
	// blobs is held shared by each artifact save, from writing its blob
	// to committing its row, and exclusively while unreferenced blobs are
	// removed; with Deps.BlobLock, across every server on the database.
	blobs blobGate
	// finishing counts the retries of the database writes of rewinds and
	// reverts whose files were restored (finishRestore).
	finishing sync.WaitGroup
}

// New returns the workspace service over the thread and artifact records.
// Deps may be left zero for the projects and threads use cases alone; the
// turn, file, skill and artifact use cases need them.
func New(store Store, artifacts Artifacts, d Deps) *Service {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.MaxArtifactBytes <= 0 {
		d.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	if d.MaxArtifactsPerCall <= 0 {
		d.MaxArtifactsPerCall = DefaultMaxArtifactsPerCall
	}
	if d.BlobGrace <= 0 {
		d.BlobGrace = DefaultBlobGrace
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if d.Leases == nil {
		d.Leases = &processLeases{held: map[string]bool{}}
	}
	return &Service{store: store, artifacts: artifacts, d: d, now: d.Now, log: log, seen: map[string]map[string]stamp{}, busy: map[string]bool{}}
}

// CreateProject makes a project in the caller's org.
func (s *Service) CreateProject(ctx context.Context, p user.Principal, name string) (project.Project, error) {
	pr, err := project.New(id.New("prj"), p.OrgID, p.UserID, name, s.now())
	if err != nil {
		return project.Project{}, err
	}
	return pr, s.store.CreateProject(ctx, pr)
}

// Projects lists the caller's org projects.
func (s *Service) Projects(ctx context.Context, p user.Principal) ([]project.Project, error) {
	return s.store.ProjectsByOrg(ctx, p.OrgID)
}

// Project returns a project of the caller's org.
func (s *Service) Project(ctx context.Context, p user.Principal, projectID string) (project.Project, error) {
	return s.store.Project(ctx, p.OrgID, projectID)
}

// RenameProject renames a project of the caller's org: its owner or an
// admin only. The rename is in the audit log ("project.rename", the names
// before and after).
func (s *Service) RenameProject(ctx context.Context, p user.Principal, projectID, name string) (project.Project, error) {
	pr, err := s.store.Project(ctx, p.OrgID, projectID)
	if err != nil {
		return project.Project{}, err
	}
	if !pr.ManageableBy(p.UserID, p.IsAdmin()) {
		return project.Project{}, fault.New(fault.Forbidden, "only the project's owner or an admin may rename it")
	}
	before := pr.Name()
	if pr, err = pr.Rename(name, s.now()); err != nil {
		return project.Project{}, err
	}
	if err := s.store.UpdateProject(ctx, pr); err != nil {
		return project.Project{}, err
	}
	if err := s.audit(ctx, p, "project.rename", pr.ID(), map[string]string{"name": before}, map[string]string{"name": pr.Name()}); err != nil {
		return project.Project{}, err
	}
	return pr, nil
}

// audit records a change made by p in the org's audit log, when the
// service has one.
func (s *Service) audit(ctx context.Context, p user.Principal, action, target string, before, after any) error {
	return s.appendAudit(ctx, s.auditEvent(p, action, target, before, after))
}

// auditEvent makes the audit event of an action of p on target.
func (s *Service) auditEvent(p user.Principal, action, target string, before, after any) audit.Event {
	e := audit.Event{ID: id.New("aud"), OrgID: p.OrgID, ActorID: p.UserID, Action: action, Target: target, At: s.now().UTC()}
	if before != nil {
		e.Before, _ = json.Marshal(before)
	}
	if after != nil {
		e.After, _ = json.Marshal(after)
	}
	return e
}

// appendAudit records e in the org's audit log, when one is kept.
func (s *Service) appendAudit(ctx context.Context, e audit.Event) error {
	if s.d.Audit == nil {
		return nil
	}
	if err := s.d.Audit.AppendEvent(ctx, e); err != nil {
		return fmt.Errorf("workspace: audit %s: %w", e.Action, err)
	}
	return nil
}

// DeleteProject deletes a project of the caller's org: its owner or an
// admin only. Its threads and artifacts go with it, and so do the artifact
// blobs that no other project's artifact shares.
func (s *Service) DeleteProject(ctx context.Context, p user.Principal, projectID string) error {
	pr, err := s.store.Project(ctx, p.OrgID, projectID)
	if err != nil {
		return err
	}
	if !pr.ManageableBy(p.UserID, p.IsAdmin()) {
		return fault.New(fault.Forbidden, "only the project's owner or an admin may delete it")
	}
	sums, err := s.artifacts.ProjectArtifactHashes(ctx, p.OrgID, projectID)
	if err != nil {
		return err
	}
	// The threads go with the project (the database cascades); their
	// containers, sandboxes and files too, whoever owns them.
	ths, err := s.store.ProjectThreads(ctx, p.OrgID, projectID)
	if err != nil {
		return err
	}
	for _, th := range ths {
		if err := s.removeSandbox(ctx, th); err != nil {
			return err
		}
	}
	// The artifacts go with the project (the database cascades); then
	// their blobs, unless another artifact shares them.
	if err := s.store.DeleteProject(ctx, p.OrgID, projectID); err != nil {
		return err
	}
	s.releaseBlobs(ctx, sums)
	return s.audit(ctx, p, "project.delete", pr.ID(), map[string]any{"name": pr.Name(), "owner_id": pr.OwnerID(), "threads": len(ths)}, nil)
}

// CreateThread makes a thread for the caller in a project of their org.
func (s *Service) CreateThread(ctx context.Context, p user.Principal, projectID, title string) (thread.Thread, error) {
	if projectID == "" {
		return thread.Thread{}, fault.New(fault.Invalid, "project is required")
	}
	if _, err := s.store.Project(ctx, p.OrgID, projectID); err != nil {
		return thread.Thread{}, err
	}
	t, err := thread.New(id.New("thr"), p.OrgID, projectID, p.UserID, title, s.now())
	if err != nil {
		return thread.Thread{}, err
	}
	return t, s.store.CreateThread(ctx, t)
}

// Threads lists the caller's threads, newest first.
func (s *Service) Threads(ctx context.Context, p user.Principal, projectID string, page thread.Page) ([]thread.Thread, error) {
	if page.Limit <= 0 {
		page.Limit = 20
	}
	// 100 a page, and one more to tell whether another page follows.
	if page.Limit > 101 {
		return nil, fault.New(fault.Invalid, "limit must be between 1 and 100")
	}
	return s.store.Threads(ctx, p.OrgID, p.UserID, projectID, page)
}

// Thread returns one of the caller's threads.
func (s *Service) Thread(ctx context.Context, p user.Principal, threadID string) (thread.Thread, error) {
	return s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
}

// RetitleThread renames one of the caller's threads.
func (s *Service) RetitleThread(ctx context.Context, p user.Principal, threadID, title string) (thread.Thread, error) {
	t, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return thread.Thread{}, err
	}
	if t, err = t.Retitle(title, s.now()); err != nil {
		return thread.Thread{}, err
	}
	return t, s.store.UpdateThread(ctx, t)
}

// processLeases are leases of one process alone on its database.
type processLeases struct {
	mu   sync.Mutex
	held map[string]bool
}

func (l *processLeases) Acquire(_ context.Context, name string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[name] {
		return false, nil
	}
	l.held[name] = true
	return true, nil
}

func (l *processLeases) Release(_ context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, name)
	return nil
}

func (l *processLeases) Holds(_ context.Context, name string) (bool, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[name], false, nil
}
