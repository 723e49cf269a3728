package workspace

import (
	"context"
	"fmt"

	"threadbox/app/messages"
	"threadbox/app/turns"
	"threadbox/domain/fault"
	"threadbox/domain/turn"
	"threadbox/domain/user"
)

// A chat turn runs detached from the request that started it; its event
// log (follow, replay, stop) is app/turns'. What is the thread's stays
// here: only the caller's threads' turns are found, and a turn runs under
// its thread's turn lease until its end is stored.

// Detach runs the turn in the server, apart from the request that started
// it, and returns its id at once. Its events go to the turn's log as they
// happen (FollowTurn reads them); it goes on when its client goes away,
// until it ends or its owner stops it (StopTurn). The thread's turn lease
// is held until the turn's end is stored: a follower on another server
// takes a running record without a lease for a turn whose server died.
func (t *Turn) Detach(ctx context.Context) (string, error) {
	return t.s.d.Turns.Detach(ctx, turns.Detached{
		ThreadID: t.thread.ID(),
		P:        t.p,
		Run: func(ctx context.Context, sink messages.Sink) error {
			_, err := t.run(ctx, sink)
			return err
		},
		Release: t.Abort,
	})
}

// FollowTurn replays the log of a turn of one of the caller's threads
// after the event numbered after (0: from the start), then follows it
// live until it ends (turns.Service.Follow). A turn of another user or
// thread is not found.
func (s *Service) FollowTurn(ctx context.Context, p user.Principal, threadID, turnID string, after int64, send func(turn.Event) error) (turns.Ending, error) {
	th, err := s.turnThread(ctx, p, threadID)
	if err != nil {
		return turns.Ending{}, err
	}
	return s.d.Turns.Follow(ctx, th, turnID, after, s.turnHeld(th), send)
}

// Turn returns a turn of one of the caller's threads (not found for a
// turn of another user or thread).
func (s *Service) Turn(ctx context.Context, p user.Principal, threadID, turnID string) (turn.Turn, error) {
	th, err := s.turnThread(ctx, p, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	return s.d.Turns.Turn(ctx, th, turnID)
}

// StopTurn stops a running turn of one of the caller's threads
// (turns.Service.Stop).
func (s *Service) StopTurn(ctx context.Context, p user.Principal, threadID, turnID string) (turn.Turn, error) {
	th, err := s.turnThread(ctx, p, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	return s.d.Turns.Stop(ctx, th, turnID)
}

// RunningTurn returns the turn of one of the caller's threads that runs
// now, on any server (not found when none does).
func (s *Service) RunningTurn(ctx context.Context, p user.Principal, threadID string) (turn.Turn, error) {
	th, err := s.turnThread(ctx, p, threadID)
	if err != nil {
		return turn.Turn{}, err
	}
	return s.d.Turns.Running(ctx, th, s.turnHeld(th))
}

// turnThread returns the id of one of the caller's threads whose turns
// are asked about.
func (s *Service) turnThread(ctx context.Context, p user.Principal, threadID string) (string, error) {
	if s.d.Turns == nil {
		return "", fault.New(fault.Unavailable, "the chat pipeline is not configured")
	}
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return "", err
	}
	return th.ID(), nil
}

// turnHeld reports whether some server holds the thread's turn lease.
func (s *Service) turnHeld(threadID string) turns.Held {
	return func(ctx context.Context) (bool, error) {
		mine, other, err := s.d.Leases.Holds(ctx, turnLease(threadID))
		if err != nil {
			return false, fmt.Errorf("workspace: turn lease: %w", err)
		}
		return mine || other, nil
	}
}
