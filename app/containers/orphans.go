package containers

import (
	"context"
	"time"

	"threadbox/domain/container"
)

// Orphans is a Folders that can find the folders no container claims
// (infra/sandbox/hostdirs.Layout).
type Orphans interface {
	// Orphans returns the folder names (usable as ids by Remove) that no
	// container of known claims and that did not change within olderThan.
	Orphans(ctx context.Context, known []string, olderThan time.Duration) ([]string, error)
}

// Orphan folders are looked for at most every orphanEvery, and removed
// when they were orphans, unchanged for orphanAge, at two looks in a row:
// a container made between the listing of the folders and that of the
// records is among the records at the next look.
const (
	orphanEvery = 30 * time.Second
	orphanAge   = time.Minute
)

// removeOrphans removes the folders and disk images that no live container
// record claims: left by a container deleted while a request prepared its
// folders again, or by a removal that failed half way. It returns the
// names removed.
func (s *Service) removeOrphans(ctx context.Context) []string {
	o, ok := s.folders.(Orphans)
	if !ok {
		return nil
	}
	s.mu.Lock()
	if s.now().Sub(s.orphansAt) < orphanEvery {
		s.mu.Unlock()
		return nil
	}
	s.orphansAt = s.now()
	s.mu.Unlock()
	var known []string
	for _, st := range []container.State{container.Idle, container.Running} {
		cs, err := s.store.ContainersInState(ctx, st)
		if err != nil {
			return nil
		}
		for _, c := range cs {
			known = append(known, c.ID())
		}
	}
	found, err := o.Orphans(ctx, known, orphanAge)
	if err != nil {
		s.log.Warn("orphan folders not listed", "cause", err.Error())
		return nil
	}
	s.mu.Lock()
	before := s.orphans
	s.orphans = map[string]bool{}
	for _, name := range found {
		s.orphans[name] = true
	}
	s.mu.Unlock()
	var removed []string
	for _, name := range found {
		if !before[name] || s.Running(name) {
			continue
		}
		unlock := s.lock(name)
		err := s.folders.Remove(ctx, name)
		unlock()
		if err != nil {
			s.log.Warn("orphan folder not removed", "folder", name, "cause", err.Error())
			continue
		}
		s.log.Info("orphan folder removed", "folder", name)
		removed = append(removed, name)
	}
	return removed
}
