// Package snapshot holds the rules of a thread's files snapshots: a copy of
// its container's workspace, uploads and outputs folders taken at the end of
// each assistant turn, which rewind and fork-at-a-turn restore, and the
// retention that bounds how many of them a thread keeps.
package snapshot

import (
	"time"

	"threadbox/domain/fault"
)

// DefaultCount is how many snapshots a thread keeps when its org sets no
// count.
const DefaultCount = 20

// Snapshot records one snapshot of a thread's files, taken when the turn
// that answered with MessageID ended.
type Snapshot struct {
	ID        string
	OrgID     string
	ThreadID  string
	MessageID string // the assistant message whose turn it ended
	Files     int
	// Size is the bytes of the files it holds; Bytes is what it stores
	// on its own: the files it does not share with the snapshot before it
	// (unchanged files are linked to that one's). The oldest a thread
	// keeps stores all it holds (Bytes equals Size).
	Size    int64
	Bytes   int64
	TakenAt time.Time
}

// Stats say what taking a snapshot made: its files and their bytes, the
// bytes it stores on its own (not shared with the snapshot before), and
// how many files were cloned by reflink rather than copied.
type Stats struct {
	Files  int
	Size   int64
	Stored int64
	Cloned int
}

// Retention bounds a thread's snapshots: at most Count of them (zero:
// DefaultCount) storing at most Bytes together (zero: no bound but the
// org's storage quota).
type Retention struct {
	Count int
	Bytes int64
}

// NewRetention checks and returns a retention.
func NewRetention(count int, bytes int64) (Retention, error) {
	if count < 0 || bytes < 0 {
		return Retention{}, fault.New(fault.Invalid, "snapshot retention: count and bytes must be 0 (the default) or positive")
	}
	return Retention{Count: count, Bytes: bytes}, nil
}

// count is the number of snapshots kept.
func (r Retention) count() int {
	if r.Count <= 0 {
		return DefaultCount
	}
	return r.Count
}

// Prune splits a thread's snapshots, oldest first, into those the
// retention drops (the oldest ones) and those it keeps. A dropped
// snapshot's files the next one linked become that one's own, so the
// oldest kept stores its whole Size: its Bytes in keep say so, and the
// caller saves it. A newest snapshot that alone stores more than Bytes is
// dropped too.
func (r Retention) Prune(snaps []Snapshot) (drop, keep []Snapshot) {
	keep = append([]Snapshot(nil), snaps...)
	total := int64(0)
	for _, s := range keep {
		total += s.Bytes
	}
	for len(keep) > 0 && (len(keep) > r.count() || r.Bytes > 0 && total > r.Bytes) {
		drop = append(drop, keep[0])
		total -= keep[0].Bytes
		keep = keep[1:]
		if len(keep) > 0 && keep[0].Bytes != keep[0].Size {
			total += keep[0].Size - keep[0].Bytes
			keep[0].Bytes = keep[0].Size
		}
	}
	return drop, keep
}
