package containers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// Durable sandboxes. Where a sandbox's life would end while its container
// lives on — the idle stop, a hand-over to another server, a graceful
// shutdown — the owner checkpoints it first when its backend can
// (sandbox.Backend.Checkpoints), into the container's checkpoint folder,
// and the next use restores it there instead of booting fresh: its
// processes, their memory, terminals and /tmp go on. A checkpoint is used
// once: it is dropped when restored, and when it cannot be (the backend
// that took it is gone, or refuses it as incompatible), the sandbox boots
// fresh over its files. Whenever a container's sandbox boots fresh
// although its earlier life did not end on purpose (a restart), the next
// tool result says so in one line (TakeNote).

// Checkpoints keeps each container's checkpoint: a folder on the host
// that a backend writes and restores from, kept where every server of the
// deployment finds it (infra/checkpoints: the blob store of the
// container's org).
type Checkpoints interface {
	// EmptyCheckpoint makes the container's checkpoint folder exist and be
	// empty, and returns it.
	EmptyCheckpoint(ctx context.Context, containerID string) (string, error)
	// SealCheckpoint records that the folder holds a whole checkpoint
	// taken by backend: from then on it is the container's checkpoint.
	SealCheckpoint(ctx context.Context, containerID, backend string) error
	// Checkpoint returns the folder of the container's checkpoint and the
	// backend that took it; ok is false when there is none, and err says
	// why one the container has cannot be used.
	Checkpoint(ctx context.Context, containerID string) (dir, backend string, ok bool, err error)
	// DropCheckpoint removes the container's checkpoint.
	DropCheckpoint(ctx context.Context, containerID string) error
	// DropFiles removes what the checkpoints kept of the container's
	// files beside its folders (a mirror in the blob store): the
	// container is being removed.
	DropFiles(ctx context.Context, containerID string) error
	// StaleCheckpoints lists the containers whose checkpoint was taken
	// before the cutoff, or whose container is gone.
	StaleCheckpoints(ctx context.Context, takenBefore time.Time) ([]string, error)
}

// lives tracks, per container, which life of its sandbox runs and the
// note its next tool result carries.
type lives struct {
	folders Checkpoints

	mu        sync.Mutex
	next      uint64
	life      map[string]uint64        // by container id
	restoring map[string]bool          // a restore is being held (hold keeps the life)
	notes     map[string]string        // by container id
	early     map[string]chan struct{} // restores started ahead of a request (Prewarm), by container id
	// canRestore is whether a backend of this server restores checkpoints,
	// as its backends said at canRestoreAt.
	canRestore   bool
	canRestoreAt time.Time
}

// begin starts a life of the container's sandbox, or goes on with the one
// a restore brings back.
func (l *lives) begin(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.life == nil {
		l.life, l.restoring, l.notes = map[string]uint64{}, map[string]bool{}, map[string]string{}
	}
	if l.restoring[id] && l.life[id] != 0 {
		delete(l.restoring, id)
		return
	}
	delete(l.restoring, id)
	l.next++
	l.life[id] = l.next
}

// restored marks that the next begin of id goes on with its life.
func (l *lives) restored(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.restoring == nil {
		l.life, l.restoring, l.notes = map[string]uint64{}, map[string]bool{}, map[string]string{}
	}
	l.restoring[id] = true
}

// note sets the container's note: its sandbox's life ended for why.
func (l *lives) note(id, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notes == nil {
		l.life, l.restoring, l.notes = map[string]uint64{}, map[string]bool{}, map[string]string{}
	}
	l.notes[id] = why
}

// clearNote drops the container's note: its life goes on after all.
func (l *lives) clearNote(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.notes, id)
}

// Life names the life of the container's sandbox in this process: a fresh
// boot or an adoption starts a new one; the restore of a checkpoint goes
// on with the life it saved, whose processes (and the sessions this
// process started in them) are still there. 0 when none ran here.
func (s *Service) Life(containerID string) uint64 {
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	return s.ckpt.life[containerID]
}

// lostWithItsServer is the note's reason for a sandbox whose server went
// without a checkpoint and which no process could adopt.
const lostWithItsServer = "its earlier sandbox ended without a checkpoint: its server stopped or it was killed"

// FreshNote starts the one-line note of a sandbox that booted fresh
// although its earlier life did not end on purpose.
const FreshNote = "[threadbox] This container's sandbox started fresh from its files"

// TakeNote returns the note for the container's next tool result, once:
// one line saying its sandbox started fresh from its files and why, so
// that processes, terminals and variables of earlier calls are gone; ""
// when there is none.
func (s *Service) TakeNote(containerID string) string {
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	why, ok := s.ckpt.notes[containerID]
	if !ok {
		return ""
	}
	delete(s.ckpt.notes, containerID)
	return FreshNote + " (" + why + "): processes, terminals and variables of earlier calls are gone."
}

// suspendLocked ends the container's sandbox where its life would end
// while the container lives on: checkpointed first when its backend can,
// then stopped (its files stay). It reports whether a checkpoint was
// taken. The caller holds the container's lock.
func (s *Service) suspendLocked(ctx context.Context, id string) (bool, error) {
	l, _ := s.held(id)
	saved := false
	if l != nil && s.ckpt.folders != nil && l.backend.Checkpoints(ctx).Supported {
		saved = s.checkpoint(ctx, id, l)
	}
	if err := s.stopLocked(ctx, id); err != nil {
		return false, err
	}
	return saved, nil
}

// checkpoint saves the running sandbox l of container id and seals it,
// reporting whether it did. A checkpoint that fails is dropped, and the
// next tool result says the sandbox started fresh.
func (s *Service) checkpoint(ctx context.Context, id string, l *live) bool {
	b := l.backend
	fail := func(err error) bool {
		s.log.Warn("sandbox not checkpointed: it stops and its next use boots fresh", "container", id, "backend", b.Name(), "cause", err.Error())
		_ = s.ckpt.folders.DropCheckpoint(context.WithoutCancel(ctx), id)
		s.ckpt.note(id, "its checkpoint failed: "+fault.FirstLine(err))
		return false
	}
	dir, err := s.ckpt.folders.EmptyCheckpoint(ctx, id)
	if err != nil {
		return fail(err)
	}
	if err := b.Checkpoint(ctx, id, dir); err != nil {
		return fail(err)
	}
	if err := s.ckpt.folders.SealCheckpoint(ctx, id, b.Name()); err != nil {
		return fail(err)
	}
	s.log.Info("sandbox checkpointed", "container", id, "backend", b.Name())
	return true
}

// restore boots the container's sandbox from its checkpoint, if it has
// one: handled reports whether it did (l is then its hold). A checkpoint
// is used once; one that cannot be restored is dropped with a note, and
// the caller boots fresh.
func (s *Service) restore(ctx context.Context, c container.Container, spec sandbox.Spec) (l *live, handled bool, err error) {
	if s.ckpt.folders == nil {
		return nil, false, nil
	}
	id := c.ID()
	dir, name, ok, fetchErr := s.ckpt.folders.Checkpoint(ctx, id)
	if !ok {
		return nil, false, nil
	}
	if fetchErr != nil && ctx.Err() != nil {
		// The caller went: the checkpoint stays for the next use.
		return nil, false, ctx.Err()
	}
	var b sandbox.Backend
	for _, cand := range s.backends {
		if cand.Name() == name {
			b = cand
		}
	}
	var why error
	switch {
	case fetchErr != nil:
		why = fetchErr
	case b == nil:
		why = fmt.Errorf("the backend %s that took its checkpoint is not configured", name)
	case b.Available(ctx) != nil:
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		why = fmt.Errorf("the backend %s that took its checkpoint cannot serve: %w", name, b.Available(ctx))
	default:
		why = b.Restore(ctx, spec, dir)
		if why != nil && ctx.Err() != nil {
			// The caller went: the checkpoint stays for the next use.
			return nil, false, ctx.Err()
		}
	}
	if err := s.ckpt.folders.DropCheckpoint(context.WithoutCancel(ctx), id); err != nil {
		s.log.Warn("used checkpoint not removed", "container", id, "cause", err.Error())
	}
	if why != nil {
		level := "cannot be restored"
		if errors.Is(why, sandbox.ErrCheckpointIncompatible) {
			level = "was taken with something this server does not have"
		}
		s.log.Warn("checkpoint dropped: the sandbox boots fresh", "container", id, "backend", name, "why", level, "cause", why.Error())
		s.ckpt.note(id, "its checkpoint could not be restored: "+fault.FirstLine(why))
		return nil, false, nil
	}
	s.ckpt.restored(id)
	s.ckpt.clearNote(id)
	s.log.Info("sandbox restored from its checkpoint", "container", id, "backend", name)
	return s.hold(ctx, c, b, 1, false, ""), true, nil
}

// Suspend checkpoints and stops every sandbox this process holds whose
// backend can checkpoint, for a graceful shutdown: their sandboxes end
// with this process, and the next use (by the next process, or another
// server) restores them. A sandbox with a command running is left to the
// shutdown as it is (it meets its end, and its next use boots fresh with
// a note). It returns the containers checkpointed.
func (s *Service) Suspend(ctx context.Context) []string {
	if s.ckpt.folders == nil {
		return nil
	}
	return s.suspendEach(ctx, func(l *live) bool { return l.active == 0 }, true)
}

// dropStale removes the checkpoints past the checkpoint maximum age and
// those whose container is gone, each under its container's lock (a
// restore in progress finishes first), and returns their containers.
func (s *Service) dropStale(ctx context.Context) []string {
	if s.ckpt.folders == nil || s.cfg.CheckpointMaxAge <= 0 {
		return nil
	}
	ids, err := s.ckpt.folders.StaleCheckpoints(ctx, s.now().Add(-s.cfg.CheckpointMaxAge))
	if err != nil {
		s.log.Warn("stale checkpoints not listed", "cause", err.Error())
		return nil
	}
	var dropped []string
	for _, id := range ids {
		unlock := s.lock(id)
		if err := s.ckpt.folders.DropCheckpoint(ctx, id); err != nil {
			s.log.Warn("stale checkpoint not removed", "container", id, "cause", err.Error())
		} else {
			dropped = append(dropped, id)
		}
		unlock()
	}
	return dropped
}

// Prewarm starts restoring the container's sandbox from its checkpoint in
// the background when it has one and its sandbox does not run here, so
// that the restore overlaps the model's answer instead of the wait of the
// tool call that needs the sandbox (which then finds it running, or waits
// on the container's lock for the restore under way). It returns at once,
// with a channel closed when that work is done; nothing is started when
// there is no checkpoint, and what the restore meets (a refusal, a
// checkpoint that cannot be used) is met again, or noted, for the request.
func (s *Service) Prewarm(ctx context.Context, containerID string) <-chan struct{} {
	done := make(chan struct{})
	if s.ckpt.folders == nil || !s.restores(ctx) || s.Running(containerID) {
		close(done)
		return done
	}
	s.ckpt.mu.Lock()
	if ch, ok := s.ckpt.early[containerID]; ok {
		s.ckpt.mu.Unlock()
		return ch
	}
	if s.ckpt.early == nil {
		s.ckpt.early = map[string]chan struct{}{}
	}
	s.ckpt.early[containerID] = done
	s.ckpt.mu.Unlock()
	go func() {
		defer func() {
			s.ckpt.mu.Lock()
			delete(s.ckpt.early, containerID)
			s.ckpt.mu.Unlock()
			close(done)
		}()
		// The request that asked may end before the restore does; the
		// restore is for the next tool call of its container all the same.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		// Under the container's lock, as a restore reads it: fetching the
		// checkpoint (unpacking its archive on a server without a copy)
		// never overlaps another fetch or a restore of the same one.
		unlock, err := s.lockFor(ctx, containerID)
		if err != nil {
			return
		}
		_, _, ok, _ := s.ckpt.folders.Checkpoint(ctx, containerID)
		unlock()
		if !ok {
			return
		}
		if l, err := s.ensure(ctx, containerID); err == nil {
			s.release(l)
		}
	}()
	return done
}

// restores reports whether a backend of this server restores checkpoints,
// asking the backends at most every 10 s. Without one, a checkpoint is
// never restored here (its first use drops it with a note, as a restore
// that fails does), so Prewarm has nothing to start: not even the lookup
// of the container's checkpoint, a database read per request that was a
// sixth of the CPU of a Messages API request offering code execution.
func (s *Service) restores(ctx context.Context) bool {
	now := s.now()
	s.ckpt.mu.Lock()
	if !s.ckpt.canRestoreAt.IsZero() && now.Sub(s.ckpt.canRestoreAt) < 10*time.Second && !now.Before(s.ckpt.canRestoreAt) {
		ok := s.ckpt.canRestore
		s.ckpt.mu.Unlock()
		return ok
	}
	s.ckpt.mu.Unlock()
	ok := false
	for _, b := range s.backends {
		if b.Checkpoints(ctx).Supported {
			ok = true
			break
		}
	}
	s.ckpt.mu.Lock()
	s.ckpt.canRestore, s.ckpt.canRestoreAt = ok, now
	s.ckpt.mu.Unlock()
	return ok
}
