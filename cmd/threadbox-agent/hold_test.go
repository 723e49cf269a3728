package main

import (
	"fmt"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// TestServerHold: after Held the agent writes nothing until Release, whose
// answer is the first frame after Held; frames the host sends meanwhile
// are ignored, commands go on after it, and Released names an id past
// every one the host used.
func TestServerHold(t *testing.T) {
	w, frames := inProcess(t)
	send := func(ty protocol.Type, id uint32, payload string) {
		t.Helper()
		must(t, protocol.WriteFrame(w, ty, id, []byte(payload)))
	}
	send(protocol.TypeExec, 8, `{"args":["sh","-c","read l; echo got $l"],"open_stdin":true}`)
	if f := next(t, frames); f.Type != protocol.TypeStarted || f.ID != 8 {
		t.Fatalf("exec answered with %v %d", f.Type, f.ID)
	}
	send(protocol.TypeHold, 20, "")
	if f := next(t, frames); f.Type != protocol.TypeHeld || f.ID != 20 {
		t.Fatalf("hold answered with %v %d", f.Type, f.ID)
	}
	// Held: a ping gets no answer.
	send(protocol.TypePing, 21, "held")
	send(protocol.TypeRelease, 22, "")
	f := next(t, frames)
	if f.Type != protocol.TypeReleased || f.ID != 22 {
		t.Fatalf("first frame after Held: %v %d, want Released", f.Type, f.ID)
	}
	var r protocol.Released
	must(t, protocol.Decode(f.Payload, &r))
	if r.NextID != 23 {
		t.Fatalf("released next id %d, want 23", r.NextID)
	}
	send(protocol.TypePing, 23, "after")
	if f := next(t, frames); f.Type != protocol.TypePong || f.ID != 23 {
		t.Fatalf("ping after release answered with %v %d (the held ping must not be)", f.Type, f.ID)
	}
	send(protocol.TypeStdin, 8, "x\n")
	if f := next(t, frames); f.Type != protocol.TypeStdout || string(f.Payload) != "got x\n" {
		t.Fatalf("command after release: %v %q", f.Type, f.Payload)
	}
	// Release without Hold is answered too.
	send(protocol.TypeRelease, 30, "")
	for {
		f := next(t, frames)
		if f.Type == protocol.TypeReleased {
			if f.ID != 30 {
				t.Fatalf("released %d", f.ID)
			}
			break
		}
	}
}

// TestReleasedSessions: Released lists the tagged commands still running,
// each with its pid and the output bytes written for it so far; untagged
// and ended commands are not listed.
func TestReleasedSessions(t *testing.T) {
	w, frames := inProcess(t)
	send := func(ty protocol.Type, id uint32, payload string) {
		t.Helper()
		must(t, protocol.WriteFrame(w, ty, id, []byte(payload)))
	}
	send(protocol.TypeExec, 3, `{"args":["sh","-c","printf hello; read l"],"open_stdin":true,"tag":"terminal:a"}`)
	send(protocol.TypeExec, 4, `{"args":["sh","-c","read l"],"open_stdin":true}`)
	send(protocol.TypeExec, 5, `{"args":["true"],"tag":"terminal:b"}`)
	pid, out, ended := 0, 0, false
	for out < 5 || !ended {
		f := next(t, frames)
		switch {
		case f.Type == protocol.TypeStarted && f.ID == 3:
			var s protocol.Started
			must(t, protocol.Decode(f.Payload, &s))
			pid = s.PID
		case f.Type == protocol.TypeStdout && f.ID == 3:
			out += len(f.Payload)
		case f.Type == protocol.TypeExit && f.ID == 5:
			ended = true
		}
	}
	send(protocol.TypeHold, 6, "")
	for next(t, frames).Type != protocol.TypeHeld {
	}
	send(protocol.TypeRelease, 7, "")
	f := next(t, frames)
	var r protocol.Released
	must(t, protocol.Decode(f.Payload, &r))
	want := []protocol.Running{{ID: 3, PID: pid, Tag: "terminal:a", Sent: 5}}
	if f.Type != protocol.TypeReleased || len(r.Sessions) != 1 || r.Sessions[0] != want[0] {
		t.Fatalf("released %v %+v, want sessions %+v", f.Type, r, want)
	}
	// Nothing the test started outlives it.
	send(protocol.TypeStdin, 3, "x\n")
	send(protocol.TypeStdin, 4, "x\n")
	for exits := 0; exits < 2; {
		if f := next(t, frames); f.Type == protocol.TypeExit {
			exits++
		}
	}
}

// TestServerOutputWindow: a command that asks for flow control has at most
// its window of output out until the host acks it; an ack lets the next
// part out, and a Release starts the window afresh for the host that takes
// it, naming the window in its session.
func TestServerOutputWindow(t *testing.T) {
	w, frames := inProcess(t)
	send := func(ty protocol.Type, id uint32, payload string) {
		t.Helper()
		must(t, protocol.WriteFrame(w, ty, id, []byte(payload)))
	}
	const window = 4096
	// out reads frames until want stdout bytes of the command came (or 10 s
	// passed), then until none came for 300 ms, and returns the stdout
	// bytes among them and the other frames.
	out := func(want int) (n int, other []protocol.Frame) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			quiet := time.After(300 * time.Millisecond)
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatal("connection closed")
				}
				if f.Type == protocol.TypeStdout && f.ID == 8 {
					n += len(f.Payload)
				} else {
					other = append(other, f)
				}
				continue
			case <-deadline:
				return n, other
			case <-quiet:
			}
			if n >= want {
				return n, other
			}
		}
	}
	send(protocol.TypeExec, 8, fmt.Sprintf(`{"args":["sh","-c","head -c 100000 /dev/zero"],"tag":"t","window":%d}`, window))
	f := next(t, frames)
	var st protocol.Started
	if f.Type != protocol.TypeStarted || protocol.Decode(f.Payload, &st) != nil || st.Window != window {
		t.Fatalf("exec answered with %v %s, want started with window %d", f.Type, f.Payload, window)
	}
	if n, _ := out(window); n != window {
		t.Fatalf("%d bytes out before any ack, want the window's %d", n, window)
	}
	send(protocol.TypeOutputAck, 8, `{"bytes":1000}`)
	if n, _ := out(1000); n != 1000 {
		t.Fatalf("%d bytes out after an ack of 1000", n)
	}
	send(protocol.TypeHold, 20, "")
	if f := next(t, frames); f.Type != protocol.TypeHeld {
		t.Fatalf("hold answered with %v", f.Type)
	}
	send(protocol.TypeRelease, 21, "")
	n, other := out(window)
	if len(other) != 1 || other[0].Type != protocol.TypeReleased {
		t.Fatalf("release answered with %v", other)
	}
	var r protocol.Released
	must(t, protocol.Decode(other[0].Payload, &r))
	if len(r.Sessions) != 1 || r.Sessions[0].ID != 8 || r.Sessions[0].Window != window || r.Sessions[0].Sent != window+1000 {
		t.Fatalf("released sessions %+v", r.Sessions)
	}
	if n != window {
		t.Fatalf("%d bytes out after the release, want a fresh window's %d", n, window)
	}
	// Acked as it comes (an ack gives back only what is out), it ends.
	got := 2*window + 1000
	for {
		send(protocol.TypeOutputAck, 8, fmt.Sprintf(`{"bytes":%d}`, window))
		f := next(t, frames)
		if f.Type == protocol.TypeExit {
			break
		}
		if f.Type != protocol.TypeStdout {
			t.Fatalf("got %v", f.Type)
		}
		got += len(f.Payload)
	}
	if got != 100000 {
		t.Fatalf("%d bytes out in all, want 100000", got)
	}
}
