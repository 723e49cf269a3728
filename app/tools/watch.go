package tools

import (
	"context"
	"fmt"
	"sort"
	"time"

	"threadbox/domain/fault"
)

// SessionInfo describes an exec_command session of a container for the
// workspace's terminal view.
type SessionInfo struct {
	ID string
	// Command is what the session runs; "" for one this process took
	// over from another server (its command was not handed over).
	Command   string
	PID       int
	Rows      int
	Cols      int
	StartedAt time.Time
	// Status is "running", "exited" or "lost", as in exec_command results.
	Status   string
	ExitCode *int
	// Cursor counts every output byte the session wrote so far.
	Cursor int64
}

// Chunk is a piece of a session's output as its terminal wrote it: raw
// bytes (a UTF-8 sequence may be split between chunks).
type Chunk struct {
	Data []byte
	// Cursor is the byte count after Data, where a later watch resumes.
	Cursor int64
	// Dropped counts the bytes before Data that no longer fit the
	// session's buffer.
	Dropped int64
}

func (t *terminal) info() SessionInfo {
	r := t.result("", t.cursor())
	return SessionInfo{
		ID: t.id, Command: t.command, PID: t.pid, Rows: int(t.size.Rows), Cols: int(t.size.Cols),
		StartedAt: t.started, Status: r.Status, ExitCode: r.ExitCode, Cursor: r.Cursor,
	}
}

// Sessions lists the exec_command sessions this process keeps for the
// container, oldest first: the running ones and the ended ones whose last
// output the model has not read yet.
func (e *Executor) Sessions(containerID string) []SessionInfo {
	e.terms.mu.Lock()
	ts := make([]*terminal, 0, len(e.terms.by[containerID]))
	for _, t := range e.terms.by[containerID] {
		ts = append(ts, t)
	}
	e.terms.mu.Unlock()
	out := make([]SessionInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.info())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// session returns the container's session, or a not-found fault.
func (e *Executor) session(containerID, sessionID string) (*terminal, error) {
	if t := e.terms.get(containerID, sessionID); t != nil {
		return t, nil
	}
	return nil, fault.Errorf(fault.NotFound, "no terminal session %s in this thread: it never existed, or it ended and its last output was read", sessionID)
}

// Session describes one of the container's sessions.
func (e *Executor) Session(containerID, sessionID string) (SessionInfo, error) {
	t, err := e.session(containerID, sessionID)
	if err != nil {
		return SessionInfo{}, err
	}
	return t.info(), nil
}

// readRaw returns a copy of the output after since, the cursor after it
// and how many bytes after since were dropped from the window.
func (t *terminal) readRaw(since int64) ([]byte, int64, int64, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	data, end, dropped := t.out.since(since)
	return data, end, dropped, t.changed
}

// Watch sends the session's output after since (what its buffer still
// holds), then its output as it arrives, until the session ends (the
// answer is then its final description) or ctx ends. Watching does not
// move the model's cursor: write_stdin reads as if nobody watched.
func (e *Executor) Watch(ctx context.Context, containerID, sessionID string, since int64, send func(Chunk) error) (SessionInfo, error) {
	t, err := e.session(containerID, sessionID)
	if err != nil {
		return SessionInfo{}, err
	}
	for {
		// Whether the session ended is read before its output: output
		// that arrived before the end is then sent before the answer.
		ended := !t.alive()
		data, cur, dropped, changed := t.readRaw(since)
		if len(data) > 0 || dropped > 0 {
			if err := send(Chunk{Data: data, Cursor: cur, Dropped: dropped}); err != nil {
				return SessionInfo{}, err
			}
		}
		since = cur
		if ended {
			return t.info(), nil
		}
		select {
		case <-changed:
		case <-t.done:
		case <-ctx.Done():
			return SessionInfo{}, fmt.Errorf("tools: watch %s: %w", sessionID, ctx.Err())
		}
	}
}

// Input types data into the session's terminal, as write_stdin does but
// without waiting for output (the watchers see it).
func (e *Executor) Input(containerID, sessionID string, data []byte) error {
	t, err := e.session(containerID, sessionID)
	if err != nil {
		return err
	}
	if !t.alive() {
		return fault.Errorf(fault.Conflict, "terminal session %s has ended; its input was not sent", sessionID)
	}
	if _, err := t.sess.Write(data); err != nil {
		return fault.Wrap(fault.Unavailable, "the terminal session did not take the input", err)
	}
	return nil
}
