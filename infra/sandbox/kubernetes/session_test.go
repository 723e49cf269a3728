package kubernetes_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// TestSessionsAndListen: over the pod's attach stream, a PTY session sees
// its terminal size and stdin and ends with its exit code, and a loopback
// listener inside the pod hands connections to the host (what the
// in-sandbox API bridge uses).
func TestSessionsAndListen(t *testing.T) {
	c := newCluster(t)
	be := c.backend(t, "sess")
	dirs := folders(t)
	id := "ctr-sess"
	bootOn(t, be, dirs, id)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	var out strings.Builder
	cmd := sandbox.Command{Args: []string{"bash", "-c", "stty size; read x; echo got:$x; exit 7"}, Output: func(_ sandbox.Stream, b []byte) {
		mu.Lock()
		out.Write(b)
		mu.Unlock()
	}}
	s, err := be.Start(ctx, id, cmd, &sandbox.TTY{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait(ctx)
	mu.Lock()
	got := out.String()
	mu.Unlock()
	if err != nil || res.ExitCode != 7 || !strings.Contains(got, "24 80") || !strings.Contains(got, "got:hello") {
		t.Errorf("session: exit %d err %v output %q", res.ExitCode, err, got)
	}

	l, err := be.Listen(ctx, id, "127.0.0.1:8123")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		defer conn.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
			served <- err
			return
		}
		_, err = conn.Write([]byte("pong"))
		served <- err
	}()
	reply := sh(t, be, id, `python3 -c "
import socket
s = socket.create_connection(('127.0.0.1', 8123), timeout=10)
s.sendall(b'ping'); print(s.recv(4).decode())"`)
	if reply != "pong" {
		t.Errorf("through the listener: %q", reply)
	}
	if err := <-served; err != nil {
		t.Errorf("host side of the listener: %v", err)
	}
}
