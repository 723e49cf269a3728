package workspace

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/app/tools"
	"threadbox/app/turns"
	"threadbox/domain/audit"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// oneTerminal is a Terminals port with one running session in one
// container; Input records what it was given.
type oneTerminal struct {
	container, id string
	mu            sync.Mutex
	typed         []string
}

func (o *oneTerminal) Sessions(containerID string) []tools.SessionInfo {
	if containerID != o.container {
		return nil
	}
	return []tools.SessionInfo{{ID: o.id, Command: "bash", Status: "running", StartedAt: time.Unix(0, 0)}}
}

func (o *oneTerminal) Session(containerID, sessionID string) (tools.SessionInfo, error) {
	if containerID != o.container || sessionID != o.id {
		return tools.SessionInfo{}, fault.New(fault.NotFound, "no such session")
	}
	return o.Sessions(containerID)[0], nil
}

func (o *oneTerminal) Watch(_ context.Context, containerID, sessionID string, _ int64, send func(tools.Chunk) error) (tools.SessionInfo, error) {
	info, err := o.Session(containerID, sessionID)
	if err != nil {
		return info, err
	}
	return info, send(tools.Chunk{Data: []byte("$ "), Cursor: 2})
}

func (o *oneTerminal) Input(_, _ string, data []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.typed = append(o.typed, string(data))
	return nil
}

type memAudit struct {
	mu     sync.Mutex
	events []audit.Event
}

func (m *memAudit) AppendEvent(_ context.Context, e audit.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
	return nil
}

// TestThreadTerminalAccess: the thread's owner lists, watches and types
// (each input audited before it is sent, the first KiB kept); an admin of
// the org lists and watches but may not type; another member finds no
// such thread; bad input is refused; a server without terminals says so.
func TestThreadTerminalAccess(t *testing.T) {
	ctx := context.Background()
	term := &oneTerminal{id: "sess_1"}
	log := &memAudit{}
	svc, _, owner, th := setupWith(t, scriptEngine{}, func(_ *turns.Deps, d *Deps) { d.Terminals, d.Audit = term, log })
	term.container = th.ID()
	adminP := user.Principal{OrgID: owner.OrgID, UserID: "usr_admin", Role: user.Admin}
	member := user.Principal{OrgID: owner.OrgID, UserID: "usr_other", Role: user.Member}
	stranger := user.Principal{OrgID: "org_2", UserID: "usr_x", Role: user.Admin}

	l, err := svc.ThreadTerminals(ctx, owner, th.ID())
	if err != nil || !l.CanType || len(l.Sessions) != 1 || l.Sessions[0].ID != "sess_1" {
		t.Fatalf("owner: %+v, %v", l, err)
	}
	if l, err = svc.ThreadTerminals(ctx, adminP, th.ID()); err != nil || l.CanType || len(l.Sessions) != 1 {
		t.Fatalf("admin: %+v, %v", l, err)
	}
	for _, p := range []user.Principal{member, stranger} {
		if _, err := svc.ThreadTerminals(ctx, p, th.ID()); fault.KindOf(err) != fault.NotFound {
			t.Errorf("%s lists: %v", p.UserID, err)
		}
		if _, err := svc.WatchTerminal(ctx, p, th.ID(), "sess_1", 0, func(tools.Chunk) error { return nil }); fault.KindOf(err) != fault.NotFound {
			t.Errorf("%s watches: %v", p.UserID, err)
		}
		if err := svc.TerminalInput(ctx, p, th.ID(), "sess_1", "id\r"); fault.KindOf(err) != fault.NotFound {
			t.Errorf("%s types: %v", p.UserID, err)
		}
	}
	var got []byte
	if _, err := svc.WatchTerminal(ctx, adminP, th.ID(), "sess_1", 0, func(c tools.Chunk) error { got = append(got, c.Data...); return nil }); err != nil || string(got) != "$ " {
		t.Fatalf("admin watches: %q, %v", got, err)
	}
	if err := svc.TerminalInput(ctx, adminP, th.ID(), "sess_1", "id\r"); fault.KindOf(err) != fault.Forbidden {
		t.Fatalf("admin types: %v", err)
	}

	long := strings.Repeat("é", 600) // 1200 bytes: the audit keeps whole characters of the first KiB
	for _, in := range []string{"ls\r", long} {
		if err := svc.TerminalInput(ctx, owner, th.ID(), "sess_1", in); err != nil {
			t.Fatalf("owner types %d bytes: %v", len(in), err)
		}
	}
	if len(term.typed) != 2 || term.typed[0] != "ls\r" || term.typed[1] != long {
		t.Fatalf("typed %q", term.typed)
	}
	if len(log.events) != 2 || log.events[0].Action != "terminal.input" || log.events[0].Target != th.ID() || log.events[0].ActorID != owner.UserID {
		t.Fatalf("audit: %+v", log.events)
	}
	var after struct {
		SessionID string `json:"session_id"`
		Bytes     int    `json:"bytes"`
		Input     string `json:"input"`
	}
	if err := json.Unmarshal(log.events[1].After, &after); err != nil || after.SessionID != "sess_1" || after.Bytes != 1200 || after.Input != strings.Repeat("é", 512) {
		t.Fatalf("audited %+v (%d bytes kept), %v", after, len(after.Input), err)
	}

	for _, c := range []struct {
		session, data string
		kind          fault.Kind
	}{
		{"sess_1", "", fault.Invalid},
		{"sess_1", strings.Repeat("x", MaxTerminalInput+1), fault.TooLarge},
		{"sess_none", "x", fault.NotFound},
	} {
		if err := svc.TerminalInput(ctx, owner, th.ID(), c.session, c.data); fault.KindOf(err) != c.kind {
			t.Errorf("input %q (%d bytes): %v, want %s", c.session, len(c.data), err, c.kind)
		}
	}
	if len(log.events) != 2 {
		t.Errorf("refused inputs were audited: %d events", len(log.events))
	}

	bare, _, p, th2 := setup(t, scriptEngine{})
	if _, err := bare.ThreadTerminals(ctx, p, th2.ID()); fault.KindOf(err) != fault.Unavailable {
		t.Errorf("without terminals: %v", err)
	}
}
