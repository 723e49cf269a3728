package container

import "time"

// Checkpoint records where a container's saved sandbox lives: a compressed
// archive of the checkpoint image in the blob store of the container's org,
// named by its SHA-256. A container has at most one; it is used once (the
// restore drops it), removed with its container, and dropped at the
// checkpoint maximum age.
type Checkpoint struct {
	ContainerID string
	OrgID       string
	Backend     string    // the sandbox backend that took it and can restore it
	SHA256      string    // the archive's blob
	Bytes       int64     // the archive's size: what the org's storage quota counts
	TakenAt     time.Time // when the sandbox was saved
}

// Stale reports whether the checkpoint is past maxAge at now (0: never).
func (c Checkpoint) Stale(now time.Time, maxAge time.Duration) bool {
	return maxAge > 0 && !c.TakenAt.Add(maxAge).After(now)
}
