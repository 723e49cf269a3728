package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"threadbox/infra/sandbox/sandboxtest"
)

// TestMain runs the tests under sandboxtest.Main, so that a run that
// reaches its timeout still ends its browsers and removes their scratch
// folders.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

const timeoutChildEnv = "THREADBOX_E2E_TIMEOUT_CHILD"

// TestTimeoutEndsBrowsers runs a test binary of this package whose test
// starts a browser and hangs until the run's timeout: the browser ends and
// its scratch folder, which the testing package does not know of, is
// removed.
func TestTimeoutEndsBrowsers(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	NeedChromium(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestTimeoutChild$", "-test.timeout=20s", "-test.v")
	cmd.Env = append(os.Environ(), timeoutChildEnv+"=1", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
		t.Fatalf("the child did not fail: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("test timed out")) {
		t.Errorf("the child's run did not end at its timeout:\n%s", out)
	}
	var pid int
	var scratch string
	_, after, _ := bytes.Cut(out, []byte("browser pid "))
	if n, err := fmt.Sscanf(string(after), "%d scratch %s", &pid, &scratch); n != 2 {
		t.Fatalf("the child did not start its browser (%v):\n%s", err, out)
	}
	if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the browser's scratch folder %s is left (%v)", scratch, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the child's browser (pid %d) outlived its run", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTimeoutChild starts a browser and waits until its test binary's run
// ends.
func TestTimeoutChild(t *testing.T) {
	if os.Getenv(timeoutChildEnv) == "" {
		t.Skip("run by TestTimeoutEndsBrowsers")
	}
	b := Start(t, 400, 300)
	fmt.Printf("browser pid %d scratch %s\n", chromedp.FromContext(b.Context()).Browser.Process().Pid, b.scratch)
	time.Sleep(time.Hour)
}
