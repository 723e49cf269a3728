// Package slot prepares the host folders of warm sandboxes, booted before
// any container claims them: a slot is a folder made a shared mount (bound
// onto itself) holding one empty subfolder per sandbox folder. A runtime
// that binds those subfolders into a sandbox with rslave propagation (runc)
// sees what Bind mounts on them later, after the sandbox started: that is
// how a claimed warm sandbox gets its container's folders. Slots need
// CAP_SYS_ADMIN (root) on Linux; elsewhere every call fails.
package slot

import (
	"path/filepath"
	"strconv"
)

// Path returns the subfolder i of the slot dir: the host source bound at
// the sandbox's i-th folder.
func Path(dir string, i int) string { return filepath.Join(dir, strconv.Itoa(i)) }
