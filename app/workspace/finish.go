package workspace

import (
	"context"
	"time"

	"threadbox/domain/audit"
	"threadbox/domain/fault"
)

// A rewind or a revert changes the container's files first, then writes
// what says so to the database: the history folded after the turn, the
// audit event. Once the files are restored, a failed write cannot be
// answered by undoing the restore: a write whose reply was lost may have
// landed, and undoing the files would then leave them disagreeing with
// the history the other way (and the sandbox the rewind stopped is gone
// already). Every such write is safe to repeat instead — a message folded
// twice stays folded, an audit event is appended under one id — so the
// writes left are retried in the background until they land, the thread
// held meanwhile: no turn, rewind or revert starts, on this server or
// another, on files and a history that disagree.

// finishBackoff bounds the wait between two tries of a time-travel write
// that failed after the files were restored: the first wait, doubled
// after each failure up to the second, well within a lease's time to
// live, so that the writes land soon after the database is back, before
// the thread's turn lease, unrenewed while it was down, could lapse.
var finishBackoff = [2]time.Duration{500 * time.Millisecond, 10 * time.Second}

// threadHold is a thread held by holdFiles, given back once by release,
// unless handed to the retry of the writes that finish its rewind or
// revert, which gives it back when they have landed.
type threadHold struct {
	s      *Service
	id     string
	handed bool
}

// release gives the thread back, unless it was handed on.
func (h *threadHold) release() {
	if !h.handed {
		h.s.releaseThread(h.id)
	}
}

// finishRestore runs steps, the database writes that follow the restore
// of the held thread's files, in order. When one fails the hold and the
// steps not done yet (the failed one first) pass to a retry in the
// background, and the error returned says that they are retried; what
// was asked is then done once they land, without the client.
func (s *Service) finishRestore(ctx context.Context, h *threadHold, what string, steps ...func(context.Context) error) error {
	for i, step := range steps {
		if err := step(ctx); err != nil {
			h.handed = true
			s.finishing.Add(1)
			go s.retrySteps(context.WithoutCancel(ctx), h, what, steps[i:], err)
			return fault.Wrap(fault.KindOf(err), "the thread's files are restored; what the "+what+" writes to the database failed and is retried until it succeeds", err)
		}
	}
	return nil
}

// retrySteps tries steps again, in order, each until it succeeds, waiting
// longer after each failure (finishBackoff), then gives the thread back.
func (s *Service) retrySteps(ctx context.Context, h *threadHold, what string, steps []func(context.Context) error, err error) {
	defer s.finishing.Done()
	defer s.releaseThread(h.id)
	wait := finishBackoff[0]
	for len(steps) > 0 {
		s.log.Warn("time travel: a database write after the files were restored failed; retrying", "what", what, "thread", h.id, "in", wait.String(), "cause", err.Error())
		time.Sleep(wait)
		wait = min(2*wait, finishBackoff[1])
		for len(steps) > 0 {
			if err = steps[0](ctx); err != nil {
				break
			}
			steps = steps[1:]
		}
	}
	s.log.Info("time travel: the writes after the files were restored landed", "what", what, "thread", h.id)
}

// auditStep is the step that appends e to the audit log. Tried again
// after a failure, an event found there already (its id taken) is one an
// earlier try appended whose answer was lost.
func (s *Service) auditStep(e audit.Event) func(context.Context) error {
	tried := false
	return func(ctx context.Context) error {
		err := s.appendAudit(ctx, e)
		if tried && fault.Is(err, fault.Conflict) {
			return nil
		}
		tried = true
		return err
	}
}
