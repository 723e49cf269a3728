// Package slot prepares the host folders of warm sandboxes, booted before
// any container claims them: a slot is a folder made a shared mount (bound
// onto itself) holding one empty subfolder per sandbox folder. A runtime
// that binds those subfolders into a sandbox with rslave propagation (runc)
// sees what Bind mounts on them later, after the sandbox started: that is
// how a claimed warm sandbox gets its container's folders. Slots need
// CAP_SYS_ADMIN (root) on Linux; elsewhere every call fails.
package slot

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Path returns the subfolder i of the slot dir: the host source bound at
// the sandbox's i-th folder.
func Path(dir string, i int) string { return filepath.Join(dir, strconv.Itoa(i)) }

// ownerFile names, in a claimed slot, the id of the container that claimed
// it. It lies beside the subfolders and is never bound into a sandbox.
const ownerFile = "owner"

// SetOwner records id as the container that claimed the slot dir, so that a
// later process can tell which container a claimed sandbox serves when its
// Docker name, a hash of the id for ids that are not names themselves,
// does not say.
func SetOwner(dir, id string) error {
	tmp := filepath.Join(dir, ownerFile+".tmp")
	if err := os.WriteFile(tmp, []byte(id), 0o600); err != nil {
		return fmt.Errorf("slot: owner: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ownerFile)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("slot: owner: %w", err)
	}
	return nil
}

// Owner returns the container id SetOwner recorded in the slot dir.
func Owner(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return "", fmt.Errorf("slot: owner: %w", err)
	}
	return string(b), nil
}
