package sandboxtest

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Need reports a missing prerequisite: a failure under CI=true, where
// .ci/run installs every service the tests need, and a skip elsewhere.
func Need(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

var (
	agentOnce sync.Once
	agentBin  string
	agentDir  string // the folder of the agent AgentBin built, if it did
	agentErr  error
)

// Main runs a package's tests, then removes the agent binary AgentBin
// built for them, so that a test run leaves nothing in the temporary
// folder. A run that would reach the binary's -test.timeout ends a little
// before it instead, after the cleanups the running tests registered with
// Cleanup, and fails. A package whose tests start sandboxes or call
// AgentBin has func TestMain(m *testing.M) { sandboxtest.Main(m) }.
func Main(m *testing.M) {
	disarm := endBeforeTimeout()
	code := m.Run()
	disarm()
	if agentDir != "" {
		_ = os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// AgentBin returns the absolute path of $THREADBOX_AGENT_BIN, or else of a
// fresh static build of cmd/threadbox-agent made once per test binary
// (which Main removes at the end).
func AgentBin(t testing.TB) string {
	t.Helper()
	agentOnce.Do(func() {
		if p := os.Getenv("THREADBOX_AGENT_BIN"); p != "" {
			if _, err := os.Stat(p); err == nil {
				agentBin, agentErr = filepath.Abs(p)
				return
			}
		}
		dir, err := os.MkdirTemp("", "threadbox-agent-")
		if err != nil {
			agentErr = err
			return
		}
		agentDir = dir
		// Jails run as uid 1000 and bind the agent from here.
		if err := os.Chmod(dir, 0o755); err != nil {
			agentErr = err
			return
		}
		agentBin = filepath.Join(dir, "threadbox-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", agentBin, "threadbox/cmd/threadbox-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build agent: %w: %s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBin
}

// Logger returns a logger that writes to the test's log until the test
// ends (a backend's goroutines may log after it).
func Logger(t *testing.T) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, nil))
}

// testLog sends what is written to the test log until the test ends.
type testLog struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
