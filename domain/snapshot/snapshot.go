// Package snapshot holds the rules of a thread's files snapshots: a copy of
// its container's workspace, uploads and outputs folders taken at the end of
// each assistant turn, which rewind and fork-at-a-turn restore, and the
// retention that bounds how many of them a thread keeps.
package snapshot

import (
	"math"
	"time"

	"threadbox/domain/fault"
)

// DefaultCount is how many snapshots a thread keeps when its org sets no
// count.
const DefaultCount = 20

// Kinds of snapshot: a turn's end (what rewind and fork go back to), the
// end of one of its sandbox tool calls, and the files as a turn found them
// before its first call, when they differ from the thread's newest
// snapshot (an upload, a terminal, a rewind or a revert changed them).
const (
	KindTurn  = "turn"
	KindCall  = "call"
	KindStart = "start"
)

// Snapshot records one snapshot of a thread's files, taken when the turn
// that answered with MessageID ended, or one of its tool calls (CallID).
type Snapshot struct {
	ID        string
	OrgID     string
	ThreadID  string
	MessageID string // the assistant message of the turn it was taken in
	Kind      string // KindTurn, KindCall or KindStart
	CallID    string // the tool call it ended (KindCall)
	// BaseID is the snapshot holding the files as they were just before
	// this one's changes ("": none, the container was empty).
	BaseID string
	Files  int
	// Size is the bytes the files it holds store; Bytes is what it
	// stores on its own: the files it does not share with the snapshot
	// before it (unchanged files are linked to that one's). The oldest a
	// thread keeps stores all it holds (Bytes equals Size). A sparse file
	// counts its data, not its size: a snapshot copies its data alone.
	Size    int64
	Bytes   int64
	TakenAt time.Time
}

// Stats say what taking a snapshot made: its files and the bytes they
// store, the bytes it stores on its own (not shared with the snapshot
// before), and how many files were cloned by reflink rather than copied.
// A sparse file's bytes are its data, not its size.
type Stats struct {
	Files  int
	Size   int64
	Stored int64
	Cloned int
	// Unchanged tells that the snapshot holds exactly what the one before
	// held (the same paths, each with the same content).
	Unchanged bool
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

// count is the number of turns whose snapshots are kept.
func (r Retention) count() int {
	if r.Count <= 0 {
		return DefaultCount
	}
	return r.Count
}

// MaxPerTurn bounds the snapshots a thread keeps per kept turn (its
// calls' and its start's), so turns that never end (stopped, failed)
// cannot pile up snapshots unbounded by the count.
const MaxPerTurn = 64

// most is how many snapshots of every kind a thread keeps at most: MaxPerTurn
// per counted turn, and no bound for a count whose product overflows (an
// org may set its count as high as an int64 holds).
func (r Retention) most() int {
	if c := r.count(); c <= math.MaxInt/MaxPerTurn {
		return c * MaxPerTurn
	}
	return math.MaxInt
}

// turns counts the turn-end snapshots among snaps.
func turns(snaps []Snapshot) int {
	n := 0
	for _, s := range snaps {
		if s.Kind == KindTurn || s.Kind == "" {
			n++
		}
	}
	return n
}

// Prune splits a thread's snapshots, oldest first, into those the
// retention drops (the oldest ones) and those it keeps. The count bounds
// the turns kept: a turn's calls' snapshots go with the turns around
// them, and at most MaxPerTurn snapshots per counted turn are kept. A dropped
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
	for len(keep) > 0 && (turns(keep) > r.count() || len(keep) > r.most() || r.Bytes > 0 && total > r.Bytes) {
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
