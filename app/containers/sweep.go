package containers

import (
	"context"
	"sync"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// sweepWorkers bounds the removals one sweep runs at once.
const sweepWorkers = 4

// SweepReport is what one sweep did.
type SweepReport struct {
	Stopped  []string // sandboxes idle-stopped (files kept)
	Expired  []string // containers past their maximum age, removed with their files (a tombstone stays)
	Adopted  []string // sandboxes of an earlier process taken over
	Dropped  []string // sandboxes no live record claims, removed
	Cleared  []string // records that claimed a sandbox nobody runs, set idle
	Released []string // disk quota mounts released
	Orphans  []string // folders no container claimed, removed
	Stale    []string // checkpoints past their maximum age or of containers gone, removed
}

// Empty reports whether the sweep did nothing.
func (r SweepReport) Empty() bool {
	return len(r.Stopped)+len(r.Expired)+len(r.Adopted)+len(r.Dropped)+len(r.Cleared)+len(r.Released)+len(r.Orphans)+len(r.Stale) == 0
}

// Sweep does, once, what keeps the sandboxes honest: it reports the
// sandbox time of the sandboxes it holds (OnMeter), stops sandboxes idle
// past the idle period, removes containers past their maximum age,
// adopts the running sandboxes of an earlier process whose records are
// live and whose leases lapsed (and removes those no record claims), sets
// idle the records that claim a sandbox nobody runs, removes stale
// checkpoints, and releases the disk quota mounts of containers not in
// use.
func (s *Service) Sweep(ctx context.Context) (SweepReport, error) {
	var r SweepReport
	s.MeterAll(ctx)
	r.Stopped = s.StopIdle(ctx)
	expired, err := s.store.ContainersCreatedBefore(ctx, s.now().Add(-s.cfg.MaxAge))
	if err != nil {
		return r, err
	}
	// A few at once: a removal mostly waits on the Docker daemon and umount.
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		slot = make(chan struct{}, sweepWorkers)
	)
	for _, c := range expired {
		wg.Add(1)
		slot <- struct{}{}
		go func() {
			defer func() { <-slot; wg.Done() }()
			ok, err := s.expire(ctx, c)
			if err != nil {
				if !fault.Is(err, fault.Unavailable) {
					s.log.Error("expired container not removed", "container", c.ID(), "cause", err.Error())
				}
				return
			}
			if !ok {
				return
			}
			mu.Lock()
			r.Expired = append(r.Expired, c.ID())
			mu.Unlock()
		}()
	}
	wg.Wait()
	var pending reconciled
	r.Adopted, r.Dropped, pending = s.reconcile(ctx)
	if r.Cleared, err = s.clear(ctx, pending); err != nil {
		return r, err
	}
	r.Released, err = s.folders.Release(ctx, s.cfg.Idle, s.Running)
	r.Orphans = s.removeOrphans(ctx)
	r.Stale = s.dropStale(ctx)
	return r, err
}

// reconciled is what a sweep's reconcile could not settle: the backends it
// could not ask (unavailable, or their Reconcile failed) and the sandboxes
// it left to a holder. The clear after it leaves their records alone,
// since a sandbox of theirs may still run: a lease that lapses between
// the reconcile and the clear would otherwise have the clear set idle the
// record of a sandbox the next sweep adopts, and lose its life.
type reconciled struct {
	backends map[string]bool // by name
	left     map[string]bool // by container id
}

// skips reports whether the clear leaves c's record to a later sweep.
func (p reconciled) skips(c container.Container) bool {
	return p.backends[c.Backend()] || p.left[c.ID()]
}

// reconcile asks each available backend for the sandboxes this process does
// not run and decides about each: adopt it when its record is live and no
// other process holds its lease, leave it to a live holder, remove it
// otherwise.
func (s *Service) reconcile(ctx context.Context) (adopted, dropped []string, pending reconciled) {
	pending = reconciled{backends: map[string]bool{}, left: map[string]bool{}}
	var leftMu sync.Mutex
	leave := func(id string) sandbox.Verdict {
		leftMu.Lock()
		pending.left[id] = true
		leftMu.Unlock()
		return sandbox.Leave
	}
	for _, b := range s.backends {
		if b.Available(ctx) != nil {
			pending.backends[b.Name()] = true
			continue
		}
		taken := map[string]container.Container{}
		decide := func(id string) sandbox.Verdict {
			if s.Running(id) {
				return sandbox.Leave
			}
			// A lease held by this process is a boot under way; one held by
			// another is that process's sandbox.
			if mine, other, err := s.leases.Holds(ctx, sandboxLease(id)); err != nil || mine || other {
				return leave(id)
			}
			c, err := s.store.Container(ctx, id)
			if fault.Is(err, fault.NotFound) {
				if ok, _ := s.leases.Acquire(ctx, sandboxLease(id)); ok {
					taken[id] = container.Container{}
					return sandbox.Drop
				}
				return sandbox.Leave
			}
			if err != nil {
				return leave(id)
			}
			ok, err := s.leases.Acquire(ctx, sandboxLease(id))
			if err != nil || !ok {
				return leave(id)
			}
			taken[id] = c
			if c.State() != container.Running {
				return sandbox.Stop // its files stay: the record lives
			}
			return sandbox.Adopt
		}
		a, d, err := b.Reconcile(ctx, decide)
		if err != nil {
			pending.backends[b.Name()] = true
			s.log.Error("reconcile failed", "backend", b.Name(), "cause", err.Error())
		}
		for _, id := range a {
			unlock := s.lock(id)
			// A request may have started it meanwhile (the lease is this
			// process's): it holds the sandbox, and its hooks ran.
			if !s.Running(id) {
				s.hold(ctx, taken[id], b, 0, true, "")
			}
			unlock()
			delete(taken, id)
		}
		// Leases taken for sandboxes not adopted go back; their records (if
		// any) say no sandbox runs.
		for id, c := range taken {
			if c.ID() != "" && c.State() == container.Running {
				_ = s.store.UpdateContainer(ctx, c.Stopped())
			}
			s.giveBack(id)
		}
		adopted, dropped = append(adopted, a...), append(dropped, d...)
	}
	return adopted, dropped, pending
}

// clear sets idle every record that claims a running sandbox which no
// live process holds: its holder died and nothing could adopt it, so its
// next result says its life is gone. What the sweep's reconcile could not
// settle (pending) waits for the next sweep.
func (s *Service) clear(ctx context.Context, pending reconciled) ([]string, error) {
	running, err := s.store.ContainersInState(ctx, container.Running)
	if err != nil {
		return nil, err
	}
	var cleared []string
	for _, c := range running {
		if s.Running(c.ID()) || pending.skips(c) {
			continue
		}
		unlock := s.lock(c.ID())
		ok, err := s.leases.Acquire(ctx, sandboxLease(c.ID()))
		if err == nil && ok && !s.Running(c.ID()) {
			if cur, err := s.store.Container(ctx, c.ID()); err == nil && cur.State() == container.Running {
				if s.store.UpdateContainer(ctx, cur.Stopped()) == nil {
					s.ckpt.note(c.ID(), lostWithItsServer)
					cleared = append(cleared, c.ID())
				}
			}
			s.giveBack(c.ID())
		}
		unlock()
	}
	return cleared, nil
}

// Run sweeps at once and then every sweep interval until ctx ends, logging
// what each sweep did.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Sweep)
	defer t.Stop()
	for {
		r, err := s.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error("sweep failed", "cause", err.Error())
		}
		for _, f := range s.swept {
			f(r)
		}
		if !r.Empty() {
			s.log.Info("swept sandboxes", "stopped", r.Stopped, "expired", r.Expired, "adopted", r.Adopted,
				"dropped", r.Dropped, "cleared", r.Cleared, "released", r.Released, "stale checkpoints", r.Stale)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
