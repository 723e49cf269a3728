package main

import (
	"testing"

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
