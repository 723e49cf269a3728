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
