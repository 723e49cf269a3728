package main

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// relayed runs a relay in the test process in front of an agent served
// over pipes, and returns its socket.
func relayed(t testing.TB) string {
	t.Helper()
	hostW, hostR := inProcessPipes(t)
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	must(t, err)
	r := &relay{agentIn: hostW}
	go r.accept(ln)
	go r.fromAgent(hostR)
	t.Cleanup(func() {
		ln.Close()
		r.closeHost()
	})
	return sock
}

// relayHost is one host connection to a relay.
type relayHost struct {
	t      *testing.T
	c      net.Conn
	frames <-chan protocol.Frame
}

// connect makes a host connection to the relay at sock.
func connect(t *testing.T, sock string) *relayHost {
	t.Helper()
	c, err := net.Dial("unix", sock)
	must(t, err)
	h := &relayHost{t: t, c: c, frames: readFrames(c)}
	t.Cleanup(func() { c.Close() })
	return h
}

func (h *relayHost) send(ty protocol.Type, id uint32, payload string) {
	h.t.Helper()
	must(h.t, protocol.WriteFrame(h.c, ty, id, []byte(payload)))
}

// TestRelayHostsComeAndGo: hosts connect to a relay one after another,
// each leaving at any point, even inside a frame. The next host's first
// frame is the answer to its Release, which names the tagged session the
// host before started; that session answers the new host's input, and no
// frame of the untagged command the host before started, nor of its
// unfinished frame, reaches the new host. A host that leaves while the
// agent is held is followed by one whose Release is answered too.
func TestRelayHostsComeAndGo(t *testing.T) {
	sock := relayed(t)
	one := connect(t, sock)
	one.send(protocol.TypeExec, 3, `{"args":["sh","-c","read l; echo got $l"],"open_stdin":true,"tag":"terminal:a"}`)
	one.send(protocol.TypeExec, 4, `{"args":["sh","-c","while :; do echo tick; sleep 0.01; done"]}`)
	started := 0
	for started < 2 {
		if f := next(t, one.frames); f.Type == protocol.TypeStarted {
			started++
		}
	}
	// Half a Stdin frame for the session, then the host is gone.
	var h [protocol.HeaderSize]byte
	h[0] = byte(protocol.TypeStdin)
	binary.BigEndian.PutUint32(h[1:5], 3)
	binary.BigEndian.PutUint32(h[5:9], 10)
	_, err := one.c.Write(append(h[:], "half"...))
	must(t, err)
	time.Sleep(20 * time.Millisecond) // the relay reads the half frame before the end
	one.c.Close()

	two := connect(t, sock)
	two.send(protocol.TypeRelease, 10, "")
	f := next(t, two.frames)
	if f.Type != protocol.TypeReleased || f.ID != 10 {
		t.Fatalf("new host's first frame: %v %d, want Released 10", f.Type, f.ID)
	}
	var rel protocol.Released
	must(t, protocol.Decode(f.Payload, &rel))
	if len(rel.Sessions) != 1 || rel.Sessions[0].ID != 3 || rel.Sessions[0].Tag != "terminal:a" || rel.NextID != 11 {
		t.Fatalf("released %+v: want the tagged session 3 only, next id 11", rel)
	}
	two.send(protocol.TypeStdin, 3, "x\n")
	for {
		f := next(t, two.frames)
		if f.ID == 4 {
			t.Fatalf("a frame of the old host's untagged command reached the new host: %v %q", f.Type, f.Payload)
		}
		if f.ID == 3 && f.Type == protocol.TypeStdout {
			if string(f.Payload) != "got x\n" {
				t.Fatalf("session output %q, want %q (the half frame must not reach the agent)", f.Payload, "got x\n")
			}
			break
		}
	}
	two.send(protocol.TypeHold, 11, "")
	for {
		f := next(t, two.frames)
		if f.Type == protocol.TypeHeld && f.ID == 11 {
			break
		}
		if f.ID != 3 {
			t.Fatalf("hold answered with %v %d", f.Type, f.ID)
		}
	}
	two.c.Close()

	three := connect(t, sock)
	three.send(protocol.TypeRelease, 12, "")
	if f := next(t, three.frames); f.Type != protocol.TypeReleased || f.ID != 12 {
		t.Fatalf("after a host left a held agent, the next host's first frame: %v %d, want Released 12", f.Type, f.ID)
	}
	three.send(protocol.TypePing, 13, "p")
	for {
		f := next(t, three.frames)
		if f.ID == 4 {
			t.Fatalf("frame of the killed command: %v", f.Type)
		}
		if f.Type == protocol.TypePong && f.ID == 13 {
			break
		}
	}
}

// BenchmarkRelayPing measures a ping's round trip to an agent served over
// pipes, directly and through a relay: what the relay's hop adds to every
// request of a gVisor sandbox.
func BenchmarkRelayPing(b *testing.B) {
	for _, via := range []string{"direct", "relayed"} {
		b.Run(via, func(b *testing.B) {
			var w io.Writer
			var r io.Reader
			if via == "direct" {
				w, r = inProcessPipes(b)
			} else {
				c, err := net.Dial("unix", relayed(b))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				w, r = c, c
			}
			payload := []byte("ping")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := protocol.WriteFrame(w, protocol.TypePing, uint32(i+1), payload); err != nil {
					b.Fatal(err)
				}
				if f, err := protocol.ReadFrame(r); err != nil || f.Type != protocol.TypePong {
					b.Fatalf("%v %v", f.Type, err)
				}
			}
		})
	}
}

// TestCappedLog: the sandbox's log starts again once it would pass its
// bound, keeping the latest lines whole.
func TestCappedLog(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "sandbox.log"))
	must(t, err)
	defer f.Close()
	l := &cappedLog{f: f, max: 10}
	for _, line := range []string{"one\n", "two\n", "three\n"} {
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(f.Name())
	must(t, err)
	if string(data) != "three\n" {
		t.Fatalf("log %q, want only the line after the bound was reached", data)
	}
}
