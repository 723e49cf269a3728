package sandboxtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// cleanupMarkEnv names, for TestHungChild, the folder its cleanups mark
// their runs in; it is unset in other runs.
const cleanupMarkEnv = "SANDBOXTEST_CLEANUP_MARKS"

// TestTimeoutRunsCleanups runs this test binary again with only
// TestHungChild and a 4 s -test.timeout: the child's run must end
// failed, saying it timed out, with the hung test's stack, after running
// each cleanup the hung test registered with Cleanup once, newest first.
func TestTimeoutRunsCleanups(t *testing.T) {
	marks := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHungChild$", "-test.timeout=4s")
	cmd.Env = append(os.Environ(), cleanupMarkEnv+"="+marks)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("the child's run ended with %v, want exit status 2:\n%s", err, out)
	}
	for _, want := range []string{"test timed out", "running tests with cleanups to run:\n\tTestHungChild\n", "sandboxtest.TestHungChild("} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the child's output does not have %q:\n%s", want, out)
		}
	}
	log, err := os.ReadFile(filepath.Join(marks, "log"))
	if err != nil {
		t.Fatalf("no cleanup ran: %v\n%s", err, out)
	}
	if got := string(log); got != "second first " {
		t.Errorf("cleanups ran as %q, want %q", got, "second first ")
	}
}

// TestHungChild registers two cleanups that append their names to
// SANDBOXTEST_CLEANUP_MARKS/log, then waits until its run ends.
func TestHungChild(t *testing.T) {
	marks := os.Getenv(cleanupMarkEnv)
	if marks == "" {
		t.Skip("run by TestTimeoutRunsCleanups")
	}
	mark := func(name string) func() {
		return func() {
			f, err := os.OpenFile(filepath.Join(marks, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return
			}
			f.WriteString(name + " ")
			f.Close()
		}
	}
	Cleanup(t, mark("first"))
	Cleanup(t, mark("second"))
	time.Sleep(time.Hour)
}
