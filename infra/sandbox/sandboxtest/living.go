package sandboxtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/sandbox"
)

// A sandbox's life, for the checkpoint tests and benchmarks of the
// backends that checkpoint: an interpreter session, a background process
// holding memory and a file open, and the commands that ask them.

// REPL is a Python program that runs each line it reads (a stand-in for
// an interpreter session of the host's).
const REPL = "import sys\nfor line in sys.stdin:\n    exec(line)\n"

// Holder starts a background Python process, out of the command's process
// group, holding x = 41, 50 MiB (every page touched) and the workspace
// file held.log open for appending, and prints its pid: on SIGUSR1 it
// writes a line through that file and x + 1 to /tmp/answer (AskHolder).
// It waits up to a minute for the process (an emulated CPU starts Python
// slowly).
const Holder = `setsid python3 -c '
import os, signal, time
x = 41
ballast = bytearray(50 << 20)
ballast[::4096] = b"x" * len(ballast[::4096])
held = open("/home/agent/workspace/held.log", "a", buffering=1)
def answer(*_):
    held.write("answered\n")
    with open("/tmp/answer.tmp", "w") as f:
        f.write(str(x + 1))
    os.rename("/tmp/answer.tmp", "/tmp/answer")
signal.signal(signal.SIGUSR1, answer)
open("/tmp/holder.pid", "w").write(str(os.getpid()))
while True:
    time.sleep(1)
' >/dev/null 2>&1 </dev/null &
for i in $(seq 600); do test -s /tmp/holder.pid && break; sleep 0.1; done; cat /tmp/holder.pid`

// AskHolder signals the Holder and prints its answer, 42.
const AskHolder = `rm -f /tmp/answer; kill -USR1 $(cat /tmp/holder.pid) && for i in $(seq 300); do test -s /tmp/answer && break; sleep 0.1; done; cat /tmp/answer`

// Output collects a session's output (its Output function is Write).
type Output struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write is a sandbox.Command's Output.
func (o *Output) Write(_ sandbox.Stream, b []byte) {
	o.mu.Lock()
	o.buf.Write(b)
	o.mu.Unlock()
}

// String returns what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// WaitFor waits up to within until the output has want, else fails t.
func (o *Output) WaitFor(t *testing.T, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(o.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q never had %q", o.String(), want)
		}
	}
}

// Bash runs script with bash in the sandbox id of be, at most timeout,
// and returns its output (stdout, then stderr) trimmed; an error of the
// call fails t.
func Bash(t *testing.T, be sandbox.Backend, id, script string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	r, err := be.Exec(ctx, id, sandbox.Command{Args: []string{"bash", "-c", script}, Timeout: timeout})
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return strings.TrimSpace(string(r.Stdout) + string(r.Stderr))
}

// ClockOff returns how far a guest's clock, read as guest (Unix
// nanoseconds, `date +%s%N`) at some moment between before and after on
// the host, is off the host's: 0 when it lies between the two, positive
// when the guest is behind, negative when it is ahead. The time the
// reading took (a restore, a slow command under load) does not count as
// an offset.
func ClockOff(before, after time.Time, guest int64) time.Duration {
	switch g := time.Unix(0, guest); {
	case g.Before(before):
		return before.Sub(g)
	case g.After(after):
		return after.Sub(g)
	}
	return 0
}
