package boxes

import (
	"net"
	"testing"

	"threadbox/infra/sandbox/agent"
)

// TestHeldClients: a kept client is taken once; keeping another for the
// same sandbox ends the first; a client already closed is not kept, so
// that a restore takes the agent over with a new one.
func TestHeldClients(t *testing.T) {
	client := func() *agent.Client {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = b.Close() })
		return NewAgent(a)
	}
	var h HeldClients
	first, second := client(), client()
	h.Put("s", first)
	h.Put("s", second)
	if first.Err() == nil {
		t.Error("the client kept before was not ended")
	}
	if got := h.Take("s"); got != second {
		t.Fatalf("Take = %p, want the client kept last", got)
	}
	if got := h.Take("s"); got != nil {
		t.Fatalf("a second Take = %p, want none", got)
	}
	closed := client()
	closed.Close()
	h.Put("s", closed)
	if got := h.Take("s"); got != nil {
		t.Fatalf("a closed client was kept: %p", got)
	}
}
