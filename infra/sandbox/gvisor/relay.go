package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
)

// A gVisor sandbox's agent speaks over its stdio, and a sandbox ends when
// nothing holds the other ends of those pipes. So that a sandbox outlives
// a threadbox process that dies at once (kill -9), and the next one takes
// it over, the pipes are held by a relay (the agent binary's relay
// subcommand, in a session of its own): it runs runsc with them
// (`runsc run --detach`, `runsc create`), reaps the sandbox's processes,
// and passes whole frames between them and one threadbox connection at a
// time on a unix socket in the container's bundle. A record beside it
// (relay.json) says which container the sandbox is and where its folders
// are bound, for the process that adopts it. The relay exits once the
// sandbox is gone.

const (
	relaySocket = "relay.sock"  // in the bundle
	relayRecord = "relay.json"  // in the bundle
	relayLog    = "sandbox.log" // the sandbox's stderr, in the bundle
	relayPID    = "relay.pid"   // the relay's pid, in the bundle
)

// relayProc is a running relay: this process's child, or one an earlier
// process started.
type relayProc struct {
	pid   int
	start string    // its start time, against pid reuse
	cmd   *exec.Cmd // nil when another process started it
}

// record is what relay.json keeps of a sandbox.
type record struct {
	ID         string          `json:"id"`
	View       string          `json:"view"`
	Mounts     []sandbox.Mount `json:"mounts"`
	Limits     sandbox.Limits  `json:"limits"`
	Restored   bool            `json:"restored"`
	RelayPID   int             `json:"relay_pid"`
	RelayStart string          `json:"relay_start"`
}

// startRelay starts the relay of the container whose bundle is bundle,
// running runsc with args, and returns once runsc started (with wait, once
// it exited: the sandbox is created) or failed.
func (b *Backend) startRelay(ctx context.Context, bundle string, wait bool, args []string) (*relayProc, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	defer readyR.Close()
	full := []string{"relay", "-socket", filepath.Join(bundle, relaySocket), "-log", filepath.Join(bundle, relayLog), "-ready", "3"}
	if wait {
		full = append(full, "-wait")
	}
	full = append(append(full, "--", b.cfg.Runsc, "--root", b.state), runscFlags...)
	cmd := exec.Command(b.cfg.AgentBin, append(full, args...)...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{readyW}
	// Its own session: it outlives this process and its signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return nil, fmt.Errorf("start relay: %w", err)
	}
	rp := &relayProc{pid: cmd.Process.Pid, cmd: cmd}
	rp.start, _ = processStart(rp.pid)
	type answer struct {
		msg []byte
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		msg, err := io.ReadAll(readyR)
		ch <- answer{msg, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		rp.kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("relay: %w", ctx.Err())
	}
	if msg := string(bytes.TrimSpace(a.msg)); msg != "ok" {
		rp.kill()
		_ = cmd.Wait()
		if msg == "" {
			msg = "exited without a word"
		}
		return nil, fmt.Errorf("%s: %s", msg, logTail(filepath.Join(bundle, relayLog)))
	}
	return rp, nil
}

// kill tells the relay to stop: it ends what is left of the sandbox (a
// created one has no agent to end with its input) and exits.
func (rp *relayProc) kill() {
	if rp.alive() {
		_ = syscall.Kill(rp.pid, syscall.SIGTERM)
	}
}

// alive reports whether the relay still runs.
func (rp *relayProc) alive() bool {
	if rp.start == "" {
		return boxes.Alive(rp.pid)
	}
	s, ok := processStart(rp.pid)
	return ok && s == rp.start
}

// wait returns once the relay exited: its sandbox is gone. A relay of
// this process is reaped; another's is watched through a pidfd.
func (rp *relayProc) wait() {
	if rp.cmd != nil {
		_ = rp.cmd.Wait()
		return
	}
	fd, err := unix.PidfdOpen(rp.pid, 0)
	if err != nil {
		// Gone already, or no pidfd: watched by polling.
		for rp.alive() {
			time.Sleep(100 * time.Millisecond)
		}
		return
	}
	defer unix.Close(fd)
	if !rp.alive() {
		return
	}
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// dialRelay connects to the relay socket of bundle. A path too long for
// a socket address is reached through a descriptor of its folder.
func dialRelay(ctx context.Context, bundle string) (net.Conn, error) {
	path := filepath.Join(bundle, relaySocket)
	if len(path) >= 100 {
		dir, err := os.Open(bundle)
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		defer dir.Close()
		path = "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + relaySocket
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return c, nil
}

// writeRecord writes bx's relay.json in its bundle.
func writeRecord(bx *box) error {
	return putRecord(bx.bundle, record{ID: bx.id, View: bx.view, Mounts: bx.mounts, Limits: bx.limits, Restored: bx.restored,
		RelayPID: bx.relay.pid, RelayStart: bx.relay.start})
}

// putRecord writes r as the relay.json of bundle.
func putRecord(bundle string, r record) error {
	data, err := json.Marshal(r)
	if err == nil {
		err = os.WriteFile(filepath.Join(bundle, relayRecord), data, 0o600)
	}
	if err != nil {
		return fmt.Errorf("relay record: %w", err)
	}
	return nil
}

// stopRelaysUnder tells the relay of every bundle in dir to stop, by the
// pid it wrote first thing (relay.pid): also those of containers runsc may
// not list yet (a runsc create under way).
func stopRelaysUnder(dir string) {
	bundles, _ := os.ReadDir(dir)
	for _, e := range bundles {
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), relayPID))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 {
			continue
		}
		// The same process: its command line names this bundle's socket.
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte(filepath.Join(dir, e.Name(), relaySocket))) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}

// readRecord reads the relay.json of the container cid.
func (b *Backend) readRecord(cid string) (record, error) {
	var r record
	data, err := os.ReadFile(filepath.Join(b.bndls, cid, relayRecord))
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	if err != nil {
		return r, fmt.Errorf("relay record: %w", err)
	}
	return r, nil
}

// logTail returns the end of the log at path.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 2048
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		_, _ = f.Seek(-tail, io.SeekEnd)
	}
	data, _ := io.ReadAll(f)
	return string(bytes.TrimSpace(data))
}

// adopt takes over the running container cid of sandbox id, which an
// earlier process started through a relay that still runs: its agent is
// released to this process, whose client attaches to the sessions it
// names. It succeeds at once when this backend adopted it already.
func (b *Backend) adopt(ctx context.Context, cid, id string) error {
	r, err := b.readRecord(cid)
	if err != nil {
		return err
	}
	if r.ID != id {
		return fmt.Errorf("relay record names %q, not %q", r.ID, id)
	}
	rp := &relayProc{pid: r.RelayPID, start: r.RelayStart}
	if !rp.alive() {
		return errors.New("its relay is gone")
	}
	defer b.boxes.Lock(id)()
	if bx := b.boxes.Get(id); bx != nil {
		if bx.cid == cid {
			// Adopted meanwhile, by another Reconcile of this backend.
			return nil
		}
		return errors.New("this process runs the sandbox in another container")
	}
	bx := b.newBox(id, cid, r.View, r.Mounts, r.Limits, r.Restored)
	bx.relay = rp
	conn, err := dialRelay(ctx, bx.bundle)
	if err != nil {
		return err
	}
	b.cidsMu.Lock()
	b.cids[cid] = true
	b.cidsMu.Unlock()
	b.watch(bx)
	if err := b.connect(ctx, bx, conn, true); err != nil {
		bx.Kill()
		<-bx.Done()
		return err
	}
	b.boxes.Put(id, bx)
	return nil
}
