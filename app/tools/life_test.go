package tools

import (
	"strings"
	"sync"
	"testing"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
)

// livedPython is a sandbox port that tells its sandbox's lives and keeps
// a note for the next result, as app/containers does.
type livedPython struct {
	*fakePython
	mu   sync.Mutex
	life uint64
	note string
}

func (l *livedPython) Life(string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.life
}

func (l *livedPython) TakeNote(string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.note
	l.note = ""
	return n
}

// TestInterpreterLives: an interpreter outlives its sandbox's stop when
// the sandbox comes back as the same life (a restored checkpoint), and
// is replaced when a new life began (a fresh boot).
func TestInterpreterLives(t *testing.T) {
	ok := func(req pyRequest) pyReply { return answer(pythonAnswer{Stdout: "ok\n"}) }
	tests := []struct {
		name    string
		between func(l *livedPython)
		fresh   bool
	}{
		{"stopped and restored: the same life", func(l *livedPython) {
			l.fakePython.mu.Lock()
			l.fakePython.stopped = true
			l.fakePython.mu.Unlock()
		}, false},
		{"booted fresh: a new life", func(l *livedPython) {
			l.mu.Lock()
			l.life++
			l.mu.Unlock()
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &livedPython{fakePython: &fakePython{reply: ok}, life: 1}
			e := New(l, newFakeFiles(), Config{})
			run(t, e, messages.SubToolCodeExecution, `{"code":"x = 41"}`)
			tc.between(l)
			r := run(t, e, messages.SubToolCodeExecution, `{"code":"print(x + 1)"}`)
			if tc.fresh {
				if l.starts != 2 || r.Stderr != NewInterpreterNote || l.sessions[0].alive() {
					t.Fatalf("starts %d, stderr %q, old alive %v; want a new interpreter", l.starts, r.Stderr, l.sessions[0].alive())
				}
				return
			}
			if l.starts != 1 || r.Stderr != "" || len(l.sessions[0].reqs) != 2 {
				t.Fatalf("starts %d, stderr %q; want the same interpreter", l.starts, r.Stderr)
			}
		})
	}
}

// TestResultNote: the container's note starts the stderr of its next
// command or cell, once; a file operation's result leaves it.
func TestResultNote(t *testing.T) {
	const note = "[threadbox] This container's sandbox started fresh from its files (why): gone."
	l := &livedPython{fakePython: &fakePython{reply: func(pyRequest) pyReply { return answer(pythonAnswer{Stdout: "ok\n"}) }}, life: 1, note: note}
	e := New(l, newFakeFiles(), Config{})
	run(t, e, wire.SubToolTextEditor, `{"command":"create","path":"/home/agent/workspace/a.txt","file_text":"x"}`)
	r := run(t, e, wire.SubToolBash, `{"command":"true"}`)
	if !strings.HasPrefix(r.Stderr, note+"\n") {
		t.Fatalf("bash stderr %q, want the note first", r.Stderr)
	}
	l.note = note
	r = run(t, e, messages.SubToolCodeExecution, `{"code":"x = 1"}`)
	if r.Stderr != note+"\n"+FirstInterpreterNote {
		t.Fatalf("cell stderr %q, want the note and then the interpreter's", r.Stderr)
	}
	if r := run(t, e, wire.SubToolBash, `{"command":"true"}`); strings.Contains(r.Stderr, note) {
		t.Fatalf("the note came twice: %q", r.Stderr)
	}
}
