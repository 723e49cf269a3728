package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"threadbox/infra/sandbox/boxes"
)

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tbsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func dialSock(t *testing.T, dir string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(dir, socketName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAcceptAgentTakesOnlyTheInit: a connection whose peer is not the
// container's init is closed and the wait goes on; the init's is taken, and
// the socket is gone afterwards.
func TestAcceptAgentTakesOnlyTheInit(t *testing.T) {
	dir := shortDir(t)
	ln, err := listenAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, socketName)); err != nil || fi.Mode().Perm()&0o007 != 0 && os.Getuid() == 0 {
		t.Fatalf("socket: %v, mode %v", err, fi.Mode())
	}
	impostor := dialSock(t, dir)
	// This test process plays both parts; initPid first names another
	// process, then this one.
	calls := 0
	initPid := func() (int, error) {
		calls++
		if calls == 1 {
			return os.Getpid() + 100000, nil
		}
		return os.Getpid(), nil
	}
	got := make(chan net.Conn, 1)
	go func() {
		c, err := acceptAgent(context.Background(), ln, nil, initPid, false)
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	// The impostor is dropped without a byte.
	_ = impostor.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := impostor.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("impostor read %d, %v; want EOF", n, err)
	}
	agentSide := dialSock(t, dir)
	c := <-got
	if c == nil {
		t.Fatal("no connection taken")
	}
	defer c.Close()
	if _, err := agentSide.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 'x' {
		t.Fatalf("taken connection is not the second dial: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, socketName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after accept: %v", err)
	}
}

func TestAcceptAgentGivesUp(t *testing.T) {
	pid := func() (int, error) { return os.Getpid(), nil }
	t.Run("deadline", func(t *testing.T) {
		ln, err := listenAgent(shortDir(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := acceptAgent(ctx, ln, nil, pid, true); !errors.Is(err, errNoAgent) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("container gone", func(t *testing.T) {
		ln, err := listenAgent(shortDir(t))
		if err != nil {
			t.Fatal(err)
		}
		gone := make(chan struct{})
		close(gone)
		if _, err := acceptAgent(context.Background(), ln, gone, pid, true); !errors.Is(err, errNoAgent) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSocketDirFallsBackToStdio(t *testing.T) {
	b := NewWithClient(nil, Config{Settings: boxes.Settings{Instance: "i"}, SocketDir: "/run/tb"})
	if d := b.socketDir("c1"); filepath.Dir(d) != "/run/tb" {
		t.Errorf("runc socket dir = %q", d)
	}
	if d := b.socketDir("c1"); d == b.socketDir("c2") {
		t.Errorf("two containers share %q", d)
	}
	for _, cfg := range []Config{
		{Settings: boxes.Settings{Instance: "i"}}, // no SocketDir
		{SocketDir: "/run/tb", Runtime: "runsc", Settings: boxes.Settings{Instance: "i"}},
		{SocketDir: "/" + string(make([]byte, 120)), Settings: boxes.Settings{Instance: "i"}},
	} {
		if d := NewWithClient(nil, cfg).socketDir("c1"); d != "" {
			t.Errorf("config %+v: socket dir %q, want stdio", cfg.Runtime, d)
		}
	}
}

// TestInitPidIsKept: every connection the boot checks sees the init's pid.
// The second connection to reach a new sandbox's socket (after one that
// was not the agent's) once read the pid's channel again, found it closed,
// and failed the boot: "cannot inspect the container for its init pid".
func TestInitPidIsKept(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 4242
	close(ch)
	pid := initPidFrom(ch)
	for i := range 3 {
		if got, err := pid(); got != 4242 || err != nil {
			t.Fatalf("check %d: pid %d, %v; want 4242", i+1, got, err)
		}
	}
	empty := make(chan int)
	close(empty)
	pid = initPidFrom(empty)
	for i := range 2 {
		if _, err := pid(); err == nil {
			t.Fatalf("check %d of a container not inspected: no error", i+1)
		}
	}
}
