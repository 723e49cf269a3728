package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// qmp is a client of QEMU's machine protocol over one connection: JSON
// objects one per line, a command answered by "return" or "error", events
// between them (skipped here). It is the few lines threadbox needs (quit,
// status, migration) rather than a library's generated bindings.
type qmp struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

// qmpReply is one line QEMU sends.
type qmpReply struct {
	Greeting *json.RawMessage `json:"QMP"`
	Return   json.RawMessage  `json:"return"`
	Error    *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

// newQMP reads QEMU's greeting on conn and leaves capability negotiation.
// QEMU sends the greeting once the machine is built (the kernel and
// initramfs read).
func newQMP(ctx context.Context, conn net.Conn) (*qmp, error) {
	q := &qmp{conn: conn, r: bufio.NewReader(conn)}
	q.mu.Lock()
	defer q.mu.Unlock()
	stop := q.deadline(ctx)
	defer stop()
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	var g qmpReply
	if err := json.Unmarshal(line, &g); err != nil || g.Greeting == nil {
		return nil, fmt.Errorf("qmp greeting: unexpected %q", line)
	}
	if _, err := q.execLocked("qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return q, nil
}

// deadline makes ctx's end (or 30 s) end the connection's waits.
func (q *qmp) deadline(ctx context.Context) (stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(30 * time.Second)
	}
	_ = q.conn.SetDeadline(d)
	return func() { _ = q.conn.SetDeadline(time.Time{}) }
}

// exec runs a command and returns its "return".
func (q *qmp) exec(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	stop := q.deadline(ctx)
	defer stop()
	return q.execLocked(cmd, args)
}

func (q *qmp) execLocked(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		var r qmpReply
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("qmp %s: %w: %q", cmd, err, line)
		}
		switch {
		case r.Event != "":
			continue
		case r.Error != nil:
			return nil, fmt.Errorf("qmp %s: %s: %s", cmd, r.Error.Class, r.Error.Desc)
		case r.Return != nil:
			return r.Return, nil
		}
	}
}

// status returns the VM's run state ("running", "paused", ...).
func (q *qmp) status(ctx context.Context) (string, error) {
	raw, err := q.exec(ctx, "query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("qmp query-status: %w", err)
	}
	if st.Status == "" {
		return "", errors.New("qmp query-status: no status")
	}
	return st.Status, nil
}

// close ends the connection.
func (q *qmp) close() error { return q.conn.Close() }

// capabilities sets x-ignore-shared: with it, QEMU leaves out of a saved
// state the RAM that a shared memory file holds, and takes it from the
// memory file at a restore; without it, the RAM is in the state.
func capabilities(ignoreShared bool) map[string]any {
	return map[string]any{"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": ignoreShared}}}
}

// save writes the VM's state (its CPUs and devices, and its RAM unless
// shared says it stays in its shared memory file) to the file path, and
// waits until it is written, the VM paused.
func (q *qmp) save(ctx context.Context, path string, shared bool) error {
	if _, err := q.exec(ctx, "migrate-set-capabilities", capabilities(shared)); err != nil {
		return err
	}
	// No bandwidth limit: the state is a file on this host.
	if _, err := q.exec(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return err
	}
	if _, err := q.exec(ctx, "migrate", map[string]any{"uri": "file:" + path}); err != nil {
		return err
	}
	for {
		raw, err := q.exec(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("qmp query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("save: migration %s: %s", st.Status, st.ErrorDesc)
		}
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("save: %w", err)
		}
	}
}

// restore loads the VM's state from the file path into a QEMU started
// with "-incoming defer" (with shared, its RAM a private copy of the
// saved memory file; else the RAM is in the state), and waits until the
// VM runs.
func (q *qmp) restore(ctx context.Context, path string, shared bool) error {
	if _, err := q.exec(ctx, "migrate-set-capabilities", capabilities(shared)); err != nil {
		return err
	}
	if _, err := q.exec(ctx, "migrate-incoming", map[string]any{"uri": "file:" + path}); err != nil {
		return err
	}
	for {
		st, err := q.status(ctx)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		switch st {
		case "running":
			return nil
		case "inmigrate":
		case "paused":
			if _, err := q.exec(ctx, "cont", nil); err != nil {
				return fmt.Errorf("restore: %w", err)
			}
		default:
			return fmt.Errorf("restore: the VM is %s", st)
		}
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
