package containers

import (
	"context"
	"errors"
	"fmt"

	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// Repairer is a Folders that can bring back a container's file system that
// went read-only under it (Prepare's sandbox.ErrFoldersReadOnly: its disk
// image met I/O errors when the server's disk filled).
type Repairer interface {
	Repair(ctx context.Context, containerID string) error
}

// errUnrepaired is what a request meets when read-only folders could not
// be repaired (the server's disk is still full).
func errUnrepaired(err error) error {
	return fault.Wrap(fault.Unavailable, "the container's files are unavailable: the server's disk is full; try again later", err)
}

// prepare prepares the container's folders, repairing them first when they
// went read-only: the sandbox, which would keep the read-only view, is
// stopped (files stay), the folders repaired, and the next use boots a
// sandbox that sees them writable again.
func (s *Service) prepare(ctx context.Context, id string) ([]sandbox.Mount, error) {
	return s.prepareOr(ctx, id, func() error {
		unlock, err := s.lockFor(ctx, id)
		if err != nil {
			return err
		}
		defer unlock()
		if err := s.stopLocked(ctx, id); err != nil {
			return fmt.Errorf("containers: repair %s: %w", id, err)
		}
		return nil
	})
}

// prepareBoot prepares the folders of a sandbox about to boot, repairing
// them when they went read-only; the caller holds the container's lock and
// lease, and no sandbox of it runs here.
func (s *Service) prepareBoot(ctx context.Context, id string) ([]sandbox.Mount, error) {
	return s.prepareOr(ctx, id, func() error { return nil })
}

// prepareOr prepares the folders; when they went read-only it calls stop,
// then repairs them.
func (s *Service) prepareOr(ctx context.Context, id string, stop func() error) ([]sandbox.Mount, error) {
	mounts, err := s.folders.Prepare(ctx, id)
	if !errors.Is(err, sandbox.ErrFoldersReadOnly) {
		return mounts, err
	}
	r, ok := s.folders.(Repairer)
	if !ok {
		return nil, errUnrepaired(err)
	}
	if err := stop(); err != nil {
		return nil, err
	}
	return s.repair(ctx, r, id)
}

func (s *Service) repair(ctx context.Context, r Repairer, id string) ([]sandbox.Mount, error) {
	s.log.Warn("container folders went read-only: repairing them", "container", id)
	if err := r.Repair(ctx, id); err != nil {
		s.log.Error("container folders not repaired", "container", id, "cause", err.Error())
		return nil, errUnrepaired(err)
	}
	mounts, err := s.folders.Prepare(ctx, id)
	if err != nil {
		return nil, errUnrepaired(err)
	}
	s.log.Info("container folders repaired", "container", id)
	return mounts, nil
}
