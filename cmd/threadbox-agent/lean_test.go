package main

import (
	"slices"
	"testing"

	"threadbox/infra/sandbox/agent/protocol"
)

func TestLeanEnviron(t *testing.T) {
	got := leanEnviron([]string{"HOME=/h", "GOMAXPROCS=4", "LANG=C"})
	want := []string{"HOME=/h", "LANG=C", "GOMAXPROCS=1", "THREADBOX_AGENT_LEAN=4"}
	if !slices.Equal(got, want) {
		t.Fatalf("leanEnviron = %q, want %q", got, want)
	}
	got = leanEnviron([]string{"HOME=/h"})
	want = []string{"HOME=/h", "GOMAXPROCS=1", "THREADBOX_AGENT_LEAN=-"}
	if !slices.Equal(got, want) {
		t.Fatalf("leanEnviron = %q, want %q", got, want)
	}
}

// A lean agent's commands get the GOMAXPROCS the agent was started with,
// not its own one.
func TestEnvironOfLeanAgent(t *testing.T) {
	for _, tc := range []struct{ env, want []string }{
		{[]string{"PATH=/bin", "GOMAXPROCS=1", "THREADBOX_AGENT_LEAN=-"}, []string{"PATH=/bin"}},
		{[]string{"PATH=/bin", "GOMAXPROCS=1", "THREADBOX_AGENT_LEAN=3"}, []string{"PATH=/bin", "GOMAXPROCS=3"}},
		// Not lean: GOMAXPROCS is the command's business.
		{[]string{"PATH=/bin", "GOMAXPROCS=1"}, []string{"PATH=/bin", "GOMAXPROCS=1"}},
	} {
		if got := environ(tc.env); !slices.Equal(got, tc.want) {
			t.Errorf("environ(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

// The first command or listener restores the runtime's Ps, once; a ping
// (the host's keepalive) does not.
func TestLeanRestoredOnFirstWork(t *testing.T) {
	calls := 0
	l := &leanProcs{restore: func() { calls++ }}
	w, frames := inProcessLean(t, l)
	must(t, protocol.WriteFrame(w, protocol.TypePing, 1, nil))
	next(t, frames)
	if calls != 0 {
		t.Fatalf("restored %d times after a ping", calls)
	}
	for id := uint32(2); id < 4; id++ {
		must(t, protocol.WriteFrame(w, protocol.TypeExec, id, []byte(`{"args":["true"]}`)))
		for f := next(t, frames); f.Type != protocol.TypeExit; f = next(t, frames) {
		}
	}
	if calls != 1 {
		t.Fatalf("restored %d times after two commands, want 1", calls)
	}
	var nilLean *leanProcs
	nilLean.busy() // an agent that is not lean
}

// The lean agent, found by leanEnv, restores its Ps rather than executing
// itself again.
func TestStartLeanInLeanAgent(t *testing.T) {
	if startLean([]string{"GOMAXPROCS=1", "THREADBOX_AGENT_LEAN=-"}) == nil {
		t.Fatal("startLean of a lean agent returned nil")
	}
}
