// Package dirwalktest swaps a folder for a symbolic link at the moment a
// dirwalk.Walker is about to open it, for the tests of walks that must
// never go through a link that code in a sandbox planted mid-walk.
package dirwalktest

import (
	"os"
	"testing"

	"threadbox/infra/dirwalk"
)

// SwapAt makes w, when it is about to descend into rel (slash-separated,
// below the walk's top), replace folder with a symbolic link to target.
// The returned function reports whether the swap happened; the hook is
// removed when the test ends.
func SwapAt(t testing.TB, w *dirwalk.Walker, rel, folder, target string) (swapped func() bool) {
	t.Helper()
	done := false
	w.BeforeDescend = func(at string) {
		if at != rel {
			return
		}
		if err := os.RemoveAll(folder); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(target, folder); err != nil {
			t.Error(err)
		}
		done = true
	}
	t.Cleanup(func() { w.BeforeDescend = nil })
	return func() bool { return done }
}
