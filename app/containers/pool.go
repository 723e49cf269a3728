package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"threadbox/domain/sandbox"
)

// Defaults of the warm pool (Config.WarmPool, WarmMemory, WarmCost).
const (
	DefaultWarmMemory int64 = 512 << 20
	DefaultWarmCost   int64 = 32 << 20
)

// pool keeps warm sandboxes: booted with the sandboxes' limits and
// environment but no tenant folders, per backend, each held under a lease
// of its slot name so that no process's sweep drops it. A boot claims
// one when its backend has one ready; the claimed sandbox keeps its slot's
// lease until it stops and is never back in the pool.
type pool struct {
	mu      sync.Mutex
	ready   map[string][]string // backend name → warm slot names, oldest first
	off     map[string]string   // backend name → why it keeps none (ErrUnsupported)
	failed  map[string]string   // backend name → the last warm boot's failure
	claimed int                 // warm sandboxes claimed since start
	// mine are the slots this process booted and whose lease it holds:
	// ready, being claimed, or claimed by a sandbox that runs.
	mine map[string]bool
	kick chan struct{}
	// fill orders this process's refills: the pool lease is per process,
	// so it cannot.
	fill sync.Mutex
}

func newPool() *pool {
	return &pool{ready: map[string][]string{}, off: map[string]string{}, failed: map[string]string{}, mine: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// poolLease is the lease a process holds while it counts and boots the
// warm sandboxes of a backend, so that processes sharing a host's
// sandboxes (replicas on one Docker Engine) never fill its pool twice.
func poolLease(backend string) string { return "warm-pool:" + backend }

// giveBackSlot gives back the lease of the warm slot name, which this
// process no longer keeps.
func (s *Service) giveBackSlot(name string) {
	s.pool.mu.Lock()
	delete(s.pool.mine, name)
	s.pool.mu.Unlock()
	s.giveBack(name)
}

// take removes and returns a ready slot of backend, or "".
func (p *pool) take(backend string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.ready[backend]
	if len(r) == 0 {
		return ""
	}
	name := r[0]
	p.ready[backend] = r[1:]
	return name
}

// wake asks the refill loop to look again.
func (p *pool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// warmCount counts the ready warm sandboxes of every backend.
func (p *pool) warmCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.ready {
		n += len(r)
	}
	return n
}

// WarmStatus is the warm pool of one backend, for the capability matrix.
type WarmStatus struct {
	Size    int    // warm sandboxes kept (SANDBOX_WARM_POOL); 0 is off
	Ready   int    // warm sandboxes ready now
	Claimed int    // claimed since start, all backends
	Note    string // why the backend keeps none, or why the pool is short
}

// WarmPool reports the warm pool of the backend named backend.
func (s *Service) WarmPool(backend string) WarmStatus {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	st := WarmStatus{Size: s.cfg.WarmPool, Ready: len(s.pool.ready[backend]), Claimed: s.pool.claimed}
	switch {
	case s.cfg.WarmPool <= 0:
		st.Note = "off (SANDBOX_WARM_POOL=0): every sandbox boots cold"
	case s.pool.off[backend] != "":
		st.Note = "every sandbox boots cold: " + s.pool.off[backend]
	case s.pool.failed[backend] != "":
		st.Note = "last warm boot failed: " + s.pool.failed[backend]
	case st.Ready < st.Size && s.warmBudget() < st.Size*len(s.backends):
		st.Note = "limited by the memory budget (SANDBOX_WARM_POOL_MEMORY)"
	}
	return st
}

// warmBudget is how many warm sandboxes the memory budget pays for.
func (s *Service) warmBudget() int {
	return int(s.cfg.WarmMemory / s.cfg.WarmCost)
}

// RunPool keeps each backend's warm pool filled, within the memory
// budget, until ctx ends; then it removes the warm sandboxes not claimed.
// It returns at once when the pool is off.
func (s *Service) RunPool(ctx context.Context) {
	if s.cfg.WarmPool <= 0 {
		return
	}
	defer s.drainPool()
	t := time.NewTicker(s.cfg.Sweep)
	defer t.Stop()
	for {
		var again <-chan time.Time
		if s.refill(ctx) {
			// Another process was counting: look again shortly.
			again = time.After(min(time.Second, s.cfg.Sweep))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.pool.kick:
		case <-again:
		}
	}
}

// RefillPool drops the warm sandboxes that ended (killed, the daemon
// restarted), then boots warm sandboxes, one at a time, until every
// backend that supports them has SANDBOX_WARM_POOL unclaimed warm
// sandboxes on its host or the memory budget is spent. A backend that
// answers ErrUnsupported is not asked again.
//
// The size bounds every unclaimed warm sandbox the backend lists
// (Backend.WarmSandboxes), not only this process's: those another live
// process booted count, and those whose process is gone (its slot's lease
// lapsed) are removed first. The counting and booting happen under the
// backend's pool lease, so replicas sharing a host never fill it twice and
// a restarted process never adds a pool beside the one its predecessor
// left.
func (s *Service) RefillPool(ctx context.Context) { s.refill(ctx) }

// refill is RefillPool; true when a backend was skipped because another
// process held its pool lease.
func (s *Service) refill(ctx context.Context) (busy bool) {
	s.pool.fill.Lock()
	defer s.pool.fill.Unlock()
	s.pruneWarm(ctx)
	for _, b := range s.backends {
		s.pool.mu.Lock()
		off := s.pool.off[b.Name()] != ""
		s.pool.mu.Unlock()
		if off || b.Available(ctx) != nil {
			continue
		}
		ok, err := s.leases.Acquire(ctx, poolLease(b.Name()))
		if err != nil || !ok {
			busy = true
			continue
		}
		for ctx.Err() == nil && s.pool.warmCount() < s.warmBudget() {
			if s.unclaimed(ctx, b) >= s.cfg.WarmPool || !s.warmOne(ctx, b) {
				break
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := s.leases.Release(rctx, poolLease(b.Name())); err != nil {
			s.log.Warn("lease not released", "lease", poolLease(b.Name()), "cause", err.Error())
		}
		cancel()
	}
	return busy
}

// unclaimed counts b's unclaimed warm sandboxes on its host, after
// removing those no live process holds. A backend that cannot list them
// counts this process's ready ones; one that cannot answer counts as
// full, so that nothing boots beyond what can be seen.
func (s *Service) unclaimed(ctx context.Context, b sandbox.Backend) int {
	s.pool.mu.Lock()
	own := len(s.pool.ready[b.Name()])
	s.pool.mu.Unlock()
	names, err := b.WarmSandboxes(ctx)
	switch {
	case errors.Is(err, sandbox.ErrUnsupported):
		return own
	case err != nil:
		s.log.Warn("warm sandboxes not counted", "backend", b.Name(), "cause", err.Error())
		return s.cfg.WarmPool
	}
	n := 0
	for _, name := range names {
		if !s.reapWarm(ctx, b, name) {
			n++
		}
	}
	return n
}

// reapWarm removes the unclaimed warm sandbox name when no live process
// holds its slot's lease (its process died, or gave it back without
// removing it); true when it did.
func (s *Service) reapWarm(ctx context.Context, b sandbox.Backend, name string) bool {
	s.pool.mu.Lock()
	mine := s.pool.mine[name]
	s.pool.mu.Unlock()
	if mine {
		return false
	}
	if ok, err := s.leases.Acquire(ctx, sandboxLease(name)); err != nil || !ok {
		return false
	}
	s.pool.mu.Lock()
	mine = s.pool.mine[name]
	s.pool.mu.Unlock()
	if mine {
		return false
	}
	defer s.giveBack(name)
	if err := b.Remove(ctx, name); err != nil {
		s.log.Warn("warm sandbox left by another process not removed", "backend", b.Name(), "slot", name, "cause", err.Error())
		return false
	}
	s.log.Info("warm sandbox left by another process removed", "backend", b.Name(), "slot", name)
	return true
}

// warmOne boots one warm sandbox on b; false when it could not.
func (s *Service) warmOne(ctx context.Context, b sandbox.Backend) bool {
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	name := sandbox.WarmPrefix + hex.EncodeToString(raw[:])
	if ok, err := s.leases.Acquire(ctx, sandboxLease(name)); err != nil || !ok {
		return false
	}
	s.pool.mu.Lock()
	s.pool.mine[name] = true
	s.pool.mu.Unlock()
	spec := sandbox.Spec{ID: name, Mounts: sandbox.FolderTargets(), Limits: s.cfg.Limits, Env: s.cfg.Env}
	err := b.Warm(ctx, spec)
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	switch {
	case errors.Is(err, sandbox.ErrUnsupported):
		s.pool.off[b.Name()] = err.Error()
		s.log.Info("sandbox backend keeps no warm sandboxes", "backend", b.Name(), "reason", err.Error())
	case err != nil:
		if ctx.Err() == nil {
			s.pool.failed[b.Name()] = err.Error()
			s.log.Warn("warm sandbox not booted", "backend", b.Name(), "cause", err.Error())
		}
	default:
		delete(s.pool.failed, b.Name())
		s.pool.ready[b.Name()] = append(s.pool.ready[b.Name()], name)
		return true
	}
	go s.giveBackSlot(name)
	return false
}

// pruneWarm removes from the pool the warm sandboxes whose backend no
// longer reports them running.
func (s *Service) pruneWarm(ctx context.Context) {
	for _, b := range s.backends {
		s.pool.mu.Lock()
		ready := slices.Clone(s.pool.ready[b.Name()])
		s.pool.mu.Unlock()
		for _, name := range ready {
			if st, err := b.Status(ctx, name); err != nil || st.State == sandbox.StateRunning {
				continue
			}
			s.pool.mu.Lock()
			s.pool.ready[b.Name()] = slices.DeleteFunc(s.pool.ready[b.Name()], func(n string) bool { return n == name })
			s.pool.mu.Unlock()
			s.log.Warn("warm sandbox ended before a claim; replacing it", "backend", b.Name(), "slot", name)
			_ = b.Remove(ctx, name)
			s.giveBackSlot(name)
		}
	}
}

// drainPool removes the warm sandboxes not claimed.
func (s *Service) drainPool() {
	s.pool.mu.Lock()
	ready := s.pool.ready
	s.pool.ready = map[string][]string{}
	s.pool.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range s.backends {
		for _, name := range ready[b.Name()] {
			if err := b.Remove(ctx, name); err != nil {
				s.log.Warn("warm sandbox not removed", "backend", b.Name(), "slot", name, "cause", err.Error())
			}
			s.giveBackSlot(name)
		}
	}
}

// claim gives c's spec a warm sandbox of b when one is ready: on success
// it returns the slot's name (whose lease the claimed sandbox keeps).
// A slot that fails its claim is removed; the caller then boots cold.
func (s *Service) claim(ctx context.Context, b sandbox.Backend, spec sandbox.Spec) string {
	name := s.pool.take(b.Name())
	if name == "" {
		return ""
	}
	// The pool looks again once the claim is over: until then the
	// backend still lists the sandbox as unclaimed.
	defer s.pool.wake()
	if err := b.Claim(ctx, name, spec); err != nil {
		s.log.Warn("warm sandbox not claimed; booting cold", "container", spec.ID, "backend", b.Name(), "slot", name, "cause", err.Error())
		go func() {
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = b.Remove(rctx, name)
			s.giveBackSlot(name)
		}()
		return ""
	}
	s.pool.mu.Lock()
	s.pool.claimed++
	s.pool.mu.Unlock()
	return name
}
