package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrowserKeepsItsScratchFilesToTheTest checks that Chromium's
// single-instance socket, which a killed browser never removes, is made in
// the test's own temporary folder rather than in the machine's /tmp.
func TestBrowserKeepsItsScratchFilesToTheTest(t *testing.T) {
	b := Start(t, 400, 300)
	target, err := os.Readlink(filepath.Join(b.profile, "SingletonSocket"))
	if err != nil {
		t.Fatalf("the profile has no single-instance socket link: %v", err)
	}
	if !strings.HasPrefix(target, b.scratch+string(filepath.Separator)) {
		t.Fatalf("the single-instance socket is at %s, outside the test's scratch folder %s", target, b.scratch)
	}
}
