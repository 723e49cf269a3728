package containers

import (
	"context"
	"fmt"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// Threads finds the threads a caller may access.
type Threads interface {
	Thread(ctx context.Context, orgID, ownerID, id string) (thread.Thread, error)
}

// Scope resolves a scope id — the id of a thread the caller may access, or a
// container id the caller chose — to its container, and makes sure its host
// folders exist. Without create, an unknown container is not found. No
// scope id (the official SDKs' Files calls send none) names the caller's
// default container, made when new — for a sandbox token, its own.
func (s *Service) Scope(ctx context.Context, p user.Principal, scopeID string, create bool) (container.Container, error) {
	if scopeID == "" {
		if p.Kind == user.SandboxToken {
			c, err := s.store.Container(ctx, p.ContainerID)
			if err != nil || !c.AccessibleBy(p.OrgID, p.UserID) {
				return container.Container{}, fault.New(fault.NotFound, "container not found")
			}
			scopeID = c.ClientID()
		} else {
			scopeID, create = container.DefaultClientID, true
		}
	}
	threadID, isThread, err := s.threadOf(ctx, p, scopeID)
	if err != nil {
		return container.Container{}, err
	}
	var c container.Container
	if isThread {
		c, err = s.ForThread(ctx, p, threadID)
	} else if create {
		c, err = s.ForUser(ctx, p, scopeID)
	} else {
		if verr := container.ValidateClientID(scopeID); verr != nil {
			return container.Container{}, fault.New(fault.NotFound, "container not found")
		}
		if c, err = s.Lookup(ctx, p, container.UserScopedID(p.UserID, scopeID)); err == nil && c.Expired(s.now(), s.cfg.MaxAge) {
			c, err = s.ForUser(ctx, p, scopeID)
		}
	}
	if err != nil {
		return container.Container{}, err
	}
	if _, err := s.prepare(ctx, c.ID()); err != nil {
		return container.Container{}, fmt.Errorf("containers: folders: %w", err)
	}
	return c, nil
}

// Peek returns the container a scope id names, as Scope does, but changes
// nothing: no container is made, none past its maximum age is removed, no
// folder is prepared. ok is false when there is none yet, or when the
// default container is past its maximum age (a request makes it anew); a
// named one past it, or removed at it (its tombstone), is the request's
// error.
func (s *Service) Peek(ctx context.Context, p user.Principal, scopeID string) (c container.Container, ok bool, err error) {
	id, isThread, err := s.threadOf(ctx, p, scopeID)
	if err != nil {
		return container.Container{}, false, err
	}
	if !isThread {
		if err := container.ValidateClientID(scopeID); err != nil {
			return container.Container{}, false, err
		}
		id = container.UserScopedID(p.UserID, scopeID)
	}
	if err := confine(p, id); err != nil {
		return container.Container{}, false, err
	}
	c, err = s.store.Container(ctx, id)
	switch {
	case fault.Is(err, fault.NotFound) && scopeID != container.DefaultClientID:
		// A container removed at its maximum age is the request's error
		// as long as its tombstone says so.
		return container.Container{}, false, s.tombstoned(ctx, p, id)
	case err != nil || !c.AccessibleBy(p.OrgID, p.UserID):
		return container.Container{}, false, nil
	case !c.Expired(s.now(), s.cfg.MaxAge):
		return c, true, nil
	case scopeID == container.DefaultClientID:
		return container.Container{}, false, nil
	}
	return container.Container{}, false, errExpired(c.ClientID())
}

// threadOf resolves a scope id naming a thread the caller may access to
// the thread's id; isThread is false for any other scope id. Another
// user's thread is not found, like a missing one.
func (s *Service) threadOf(ctx context.Context, p user.Principal, scopeID string) (id string, isThread bool, err error) {
	threadID, isThread := container.ParseRef(scopeID).Thread()
	if s.threads == nil || !isThread {
		return "", false, nil
	}
	t, err := s.threads.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return "", true, fault.New(fault.NotFound, "container not found")
	}
	return t.ID(), true, nil
}

// StorageID returns the storage id a scope id names for p — a thread's,
// the sandbox token's own, or the caller's container of that client id —
// whether or not the container exists, making and changing nothing.
func (s *Service) StorageID(ctx context.Context, p user.Principal, scopeID string) (string, error) {
	if scopeID == "" {
		if p.Kind == user.SandboxToken {
			return p.ContainerID, nil
		}
		scopeID = container.DefaultClientID
	}
	id, isThread, err := s.threadOf(ctx, p, scopeID)
	if err != nil {
		return "", err
	}
	if !isThread {
		if err := container.ValidateClientID(scopeID); err != nil {
			return "", fault.New(fault.NotFound, "container not found")
		}
		id = container.UserScopedID(p.UserID, scopeID)
	}
	return id, confine(p, id)
}

// Container is Scope returning the storage id (the Files API's port).
func (s *Service) Container(ctx context.Context, p user.Principal, scopeID string, create bool) (string, error) {
	c, err := s.Scope(ctx, p, scopeID, create)
	return c.ID(), err
}

// confine refuses a sandbox token every container but the one it was
// issued for: code in one sandbox never reaches another container's files
// or sandbox, even one of the same user (docs/sandbox-tools.md).
func confine(p user.Principal, id string) error {
	if p.Kind != user.SandboxToken || id == p.ContainerID {
		return nil
	}
	return fault.New(fault.Forbidden, "a sandbox token acts only on the container of its own sandbox")
}
