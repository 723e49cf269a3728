package kubernetes

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
	"threadbox/infra/sandbox/boxes"
)

// peer stands for a sandbox container at the far end of an attach
// stream: it answers pings when answer is set, and otherwise reads and
// drops every frame, as a stream that carries nothing does.
func peer(t *testing.T, answer bool) *box {
	t.Helper()
	host, far := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := protocol.ReadFrame(far)
			if err != nil {
				return
			}
			if answer && f.Type == protocol.TypePing {
				if err := protocol.WriteFrame(far, protocol.TypePong, f.ID, f.Payload); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { host.Close(); far.Close(); <-done })
	return &box{agent: boxes.NewAgent(host), done: make(chan struct{}), stop: func() { host.Close() }}
}

// TestAttachAgentReattachesSilentStream: a stream that gives no answer
// is closed and the agent reached through a second one; a stream that
// ends fails the boot at once; a context that ends stops the attempts.
func TestAttachAgentReattachesSilentStream(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var opened []*box
	bx, err := attachAgent(ctx, 300*time.Millisecond, log, func() (*box, error) {
		b := peer(t, len(opened) == 1)
		opened = append(opened, b)
		return b, nil
	})
	if err != nil || len(opened) != 2 || bx != opened[1] {
		t.Fatalf("silent first stream: box %p err %v after %d streams, want the second stream's box", bx, err, len(opened))
	}
	if err := opened[0].agent.Ping(ctx); err == nil {
		t.Error("the silent stream was left open")
	}

	ended := 0
	_, err = attachAgent(ctx, time.Second, log, func() (*box, error) {
		ended++
		b := peer(t, false)
		close(b.done)
		return b, nil
	})
	if err == nil || ended != 1 {
		t.Errorf("ended stream: %v after %d streams, want one failed attempt", err, ended)
	}

	short, cancelShort := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancelShort()
	silent := 0
	_, err = attachAgent(short, 200*time.Millisecond, log, func() (*box, error) {
		silent++
		return peer(t, false), nil
	})
	if err == nil || silent < 2 {
		t.Errorf("always silent: %v after %d streams, want an error once the boot's time is up", err, silent)
	}
}
