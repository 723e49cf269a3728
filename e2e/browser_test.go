package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrowserKeepsItsScratchFilesToTheTest checks that Chromium's
// single-instance socket, which a killed browser never removes, is made in
// a folder of the test's own rather than in the machine's /tmp, and that a
// long test name does not make the socket's path too long for Chromium.
func TestBrowserKeepsItsScratchFilesToTheTest(t *testing.T) {
	for _, name := range []string{"short", strings.Repeat("a test name as long as many of the suite's ", 3)} {
		t.Run(name, func(t *testing.T) {
			b := Start(t, 400, 300)
			target, err := os.Readlink(filepath.Join(b.profile, "SingletonSocket"))
			if err != nil {
				t.Fatalf("the profile has no single-instance socket link: %v", err)
			}
			if !strings.HasPrefix(target, b.scratch+string(filepath.Separator)) {
				t.Fatalf("the single-instance socket is at %s, outside the test's scratch folder %s", target, b.scratch)
			}
		})
	}
}
