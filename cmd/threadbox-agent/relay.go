package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"threadbox/infra/sandbox/agent/protocol"
)

// relayCommand is the subcommand that runs the agent binary as a relay on
// the host: `threadbox-agent relay -socket PATH [-log PATH] [-ready FD]
// [-wait] -- COMMAND...`.
//
// A sandbox whose agent speaks over its stdio (gVisor's) ends when the
// process holding the other ends of those pipes does. The relay holds them
// instead of threadbox, so that the sandbox outlives a threadbox process
// that dies at once (kill -9) and the next one takes it over. It writes
// its pid beside the socket (relay.pid), makes the agent's pipes, listens
// on the socket and runs COMMAND with the pipes as its stdio (`runsc run
// --detach`, `runsc create`: runsc leaves the sandbox with the pipes and
// exits). It says ok on descriptor FD (else on stderr) once COMMAND
// started, or with -wait once it exited successfully, and why not
// otherwise. Then it reaps the sandbox's processes as their subreaper and
// serves one host connection at a time, passing whole frames both ways
// (protocol.TypeHangup); the sandbox's stderr is appended to the log. It
// exits once the agent's output ends (the sandbox is gone).
const relayCommand = "relay"

// relayReap bounds the wait, once the agent's output ended, for the
// sandbox's processes to exit and be reaped.
const relayReap = 10 * time.Second

// relayLogMax bounds the sandbox's log: a sandbox may live for weeks.
const relayLogMax = 1 << 20

// cappedLog appends to a file and starts it again once it would pass max
// bytes, so that it keeps the sandbox's latest lines.
type cappedLog struct {
	mu   sync.Mutex
	f    *os.File
	max  int64
	size int64
}

func (l *cappedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size == 0 {
		if st, err := l.f.Stat(); err == nil {
			l.size = st.Size()
		}
	}
	if l.size+int64(len(p)) > l.max {
		if err := l.f.Truncate(0); err == nil {
			_, _ = l.f.Seek(0, io.SeekStart)
			l.size = 0
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

// runRelay runs the relay subcommand and returns its exit code.
func runRelay(args []string) int {
	fs := flag.NewFlagSet("threadbox-agent relay", flag.ContinueOnError)
	socket := fs.String("socket", "", "unix socket the host connects to")
	logPath := fs.String("log", "", "file the sandbox's stderr is appended to")
	readyFD := fs.Int("ready", -1, "descriptor the relay writes ok, or why it failed, to and closes")
	wait := fs.Bool("wait", false, "say ok once COMMAND exited successfully (runsc create), not once it started")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ready := io.WriteCloser(nopCloser{os.Stderr})
	if *readyFD >= 0 {
		ready = os.NewFile(uintptr(*readyFD), "ready")
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(ready, format, a...)
		ready.Close()
		return 1
	}
	if *socket == "" || fs.NArg() == 0 {
		return fail("relay: usage: relay -socket PATH [-log PATH] -- COMMAND...")
	}
	if err := setChildSubreaper(); err != nil {
		return fail("relay: subreaper: %v", err)
	}
	// First, so that whoever cleans up the socket's folder finds the relay.
	if err := os.WriteFile(filepath.Join(filepath.Dir(*socket), "relay.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fail("relay: %v", err)
	}
	log := io.Discard
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fail("relay: log: %v", err)
		}
		defer f.Close()
		log = &cappedLog{f: f, max: relayLogMax}
	}
	p, err := relayPipes()
	if err != nil {
		return fail("relay: %v", err)
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(log, p.errR)
		close(copied)
	}()
	// Told to stop, the relay ends the sandbox it holds (and runsc, while it runs): one created and
	// not started has no agent to end with its input.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-stop
		killChildren()
		reapAll(relayReap)
		os.Exit(1)
	}()
	// A socket address is short: the socket is bound by its name in its
	// folder, the relay's working directory from now on.
	if err := os.Chdir(filepath.Dir(*socket)); err != nil {
		return fail("relay: %v", err)
	}
	name := filepath.Base(*socket)
	_ = os.Remove(name)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return fail("relay: listen: %v", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(name, 0o600); err != nil {
		ln.Close()
		return fail("relay: %v", err)
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW
	err = cmd.Start()
	p.inR.Close()
	p.outW.Close()
	p.errW.Close()
	if err == nil && *wait {
		err = cmd.Wait()
	}
	if err != nil {
		// What runsc left of the sandbox ends.
		ln.Close()
		p.inW.Close()
		killChildren()
		reapAll(time.Second)
		select {
		case <-copied:
		case <-time.After(time.Second):
		}
		return fail("relay: %s: %v", fs.Arg(0), err)
	}
	if !*wait {
		// The host learns of a failure from the sandbox's end: runsc
		// leaves nothing, and the agent's output ends.
		go func() {
			if err := cmd.Wait(); err != nil {
				fmt.Fprintf(log, "relay: %s: %v\n", fs.Arg(0), err)
				killChildren()
			}
		}()
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()
	r := &relay{agentIn: p.inW}
	go r.accept(ln)
	r.fromAgent(p.outR)
	// The agent's output ended: the sandbox is gone or going.
	ln.Close()
	r.closeHost()
	p.inW.Close()
	reapAll(relayReap)
	killChildren()
	reapAll(time.Second)
	return 0
}

// killChildren sends SIGKILL to every child of the relay: the sandbox's
// processes, reparented to it.
func killChildren() {
	self := os.Getpid()
	for _, p := range readProcs("/proc") {
		if p.ppid == self {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// nopCloser is a writer whose Close does nothing.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// agentPipes are the agent's stdin, stdout and stderr: the relay writes
// inW and reads outR and errR; the others are the sandbox's.
type agentPipes struct{ inR, inW, outR, outW, errR, errW *os.File }

// relayPipes makes the agent's pipes.
func relayPipes() (*agentPipes, error) {
	var p agentPipes
	var err error
	if p.inR, p.inW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		return nil, err
	}
	return &p, nil
}

// reapAll waits for every child (the sandbox's processes, reparented to
// the relay) to exit, up to max.
func reapAll(max time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, 0, nil); errors.Is(err, syscall.ECHILD) {
				return
			} else if err != nil && !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(max):
	}
}

// relay passes whole frames between one host connection at a time and
// the agent's pipes.
type relay struct {
	agentIn io.Writer // the agent's stdin: only the host loop writes it

	mu   sync.Mutex
	host net.Conn // the connected host, nil between hosts
	// gate is set from a host's end until the agent answers the Hangup
	// numbered gateID: the agent's frames up to that answer are dropped.
	gate   bool
	gateID uint32
	hangs  uint32
}

// accept serves the hosts that connect, one after another, until ln
// closes.
func (r *relay) accept(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		r.serveHost(c)
	}
}

// serveHost passes the frames of host c to the agent until c ends, then
// tells the agent its host is gone. A frame c sent in part is not passed.
func (r *relay) serveHost(c net.Conn) {
	r.mu.Lock()
	r.host = c
	r.mu.Unlock()
	eachFrame(c, func(f []byte) bool {
		_, err := r.agentIn.Write(f)
		return err == nil
	})
	c.Close()
	r.mu.Lock()
	r.host = nil
	r.hangs++
	id := protocol.AgentIDBit | r.hangs
	r.gate, r.gateID = true, id
	r.mu.Unlock()
	_ = protocol.WriteFrame(r.agentIn, protocol.TypeHangup, id, nil)
}

// closeHost ends the connection of the host connected, if any.
func (r *relay) closeHost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.host != nil {
		r.host.Close()
	}
}

// fromAgent passes the agent's frames to the connected host until the
// agent's output ends. Frames with no host to take them, or from before
// the agent's answer to the last Hangup, are dropped.
func (r *relay) fromAgent(out io.Reader) {
	eachFrame(out, func(f []byte) bool {
		r.mu.Lock()
		if r.gate {
			if protocol.Type(f[0]) == protocol.TypeHungUp && binary.BigEndian.Uint32(f[1:5]) == r.gateID {
				r.gate = false
			}
			r.mu.Unlock()
			return true
		}
		c := r.host
		r.mu.Unlock()
		if c != nil {
			// A host that is gone is seen by its own loop.
			_, _ = c.Write(f)
		}
		return true
	})
}

// eachFrame reads whole frames (header and payload) from r and hands each
// to fn, whose slice is reused after it returns, until r ends, a frame is
// malformed or fn returns false.
func eachFrame(r io.Reader, fn func(frame []byte) bool) {
	in := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	var err error
	for {
		if buf, err = readRawFrame(in, buf[:0]); err != nil || !fn(buf) {
			return
		}
	}
}

// readRawFrame appends one whole frame read from r, header and payload,
// to buf.
func readRawFrame(r io.Reader, buf []byte) ([]byte, error) {
	buf = append(buf, make([]byte, protocol.HeaderSize)...)
	if _, err := io.ReadFull(r, buf[:protocol.HeaderSize]); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(buf[5:9])
	if n > protocol.MaxPayload {
		return buf, protocol.ErrFrameTooLarge
	}
	buf = append(buf, make([]byte, n)...)
	_, err := io.ReadFull(r, buf[protocol.HeaderSize:])
	return buf, err
}
