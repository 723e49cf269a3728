package workspace

import (
	"context"
	"fmt"

	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/org"
	"threadbox/domain/snapshot"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// Time travel: at the end of every assistant turn the thread's container
// files (workspace, uploads, outputs) are snapshotted; a rewind folds the
// history after a turn as an earlier version and gives the container that
// turn's files back, and a fork at a turn starts a new thread with the
// history up to it and its files as they were then.

// SnapshotRecords keeps the records of threads' files snapshots
// (infra/store.Snapshots).
type SnapshotRecords interface {
	// SaveSnapshot records a snapshot, or saves what it stores on its own
	// when it is recorded already.
	SaveSnapshot(ctx context.Context, sn snapshot.Snapshot) error
	// ThreadSnapshots lists a thread's snapshots, oldest first.
	ThreadSnapshots(ctx context.Context, threadID string) ([]snapshot.Snapshot, error)
	// MessageSnapshot returns the snapshot of the turn that answered with
	// messageID (fault.NotFound when none is kept).
	MessageSnapshot(ctx context.Context, threadID, messageID string) (snapshot.Snapshot, error)
	// DeleteSnapshot forgets a snapshot.
	DeleteSnapshot(ctx context.Context, id string) error
	// ThreadsExist tells which of ids name a thread that exists.
	ThreadsExist(ctx context.Context, ids []string) (map[string]bool, error)
}

// SnapshotFiles takes and restores the snapshots of containers' folders
// on the host (infra/sandbox/hostdirs.Layout).
type SnapshotFiles interface {
	// TakeSnapshot copies the container's folders into the thread's
	// snapshot snapshotID, linking the files unchanged since prevID.
	TakeSnapshot(ctx context.Context, threadID, snapshotID, prevID, containerID string) (snapshot.Stats, error)
	// RestoreSnapshot makes the container's folders hold exactly the
	// snapshot's files.
	RestoreSnapshot(ctx context.Context, threadID, snapshotID, containerID string) error
	// DropSnapshot removes one snapshot's files; DropSnapshots all of a
	// thread's.
	DropSnapshot(ctx context.Context, threadID, snapshotID string) error
	DropSnapshots(ctx context.Context, threadID string) error
	// SnapshotThreads lists the threads that have snapshots' files.
	SnapshotThreads(ctx context.Context) ([]string, error)
	// SnapshotManifest lists a snapshot's files by path ("" is the empty
	// snapshot); fault.NotFound when its files are gone.
	SnapshotManifest(ctx context.Context, threadID, snapshotID string) (map[string]snapshot.File, error)
	// SnapshotFile reads up to max bytes of a snapshot's regular file,
	// and tells whether it holds more.
	SnapshotFile(ctx context.Context, threadID, snapshotID, path string, max int64) ([]byte, bool, error)
	// ContainerFiles returns the container's files at paths as they are
	// now (missing ones left out).
	ContainerFiles(ctx context.Context, containerID string, paths []string) (map[string]snapshot.File, error)
	// RestorePaths makes each of the container's paths what the snapshot
	// holds there, removing those it does not hold.
	RestorePaths(ctx context.Context, threadID, snapshotID, containerID string, paths []string) error
	// RestoreGrowth returns how many more bytes the container's files
	// store once paths (nil: its folders whole, as RestoreSnapshot makes
	// them) are what the snapshot holds: negative when the restore frees
	// space. A sparse file counts its data, as a snapshot's Size does.
	RestoreGrowth(ctx context.Context, threadID, snapshotID, containerID string, paths []string) (int64, error)
	// NewStateDir makes the empty folder of a turn snapshot's running
	// state; StateDir names it, whether or not it exists; StateBytes
	// returns the bytes it holds.
	NewStateDir(ctx context.Context, threadID, snapshotID string) (string, error)
	StateDir(threadID, snapshotID string) string
	StateBytes(threadID, snapshotID string) int64
}

// RunningState saves and puts back the running state of a container's
// sandbox — its processes, their memory, interpreters and terminals —
// where its backend checkpoints (app/containers.Service).
type RunningState interface {
	// SaveState saves the state of the container's running sandbox into
	// dir and leaves it running; false when it saved none (no sandbox
	// runs here, or its backend keeps files only).
	SaveState(ctx context.Context, containerID, dir string) (bool, error)
	// EndSandbox ends the container's sandbox that runs now, handed over
	// first where another server holds it, before its files go back to
	// an earlier state; an error when it could not, and the files must
	// then stay as they are.
	EndSandbox(ctx context.Context, containerID string) error
	// RestoreState makes the state saved in dir the one the container's
	// next use restores, ending the sandbox that runs now; without a
	// saved state the next use boots fresh and its tool result says why.
	RestoreState(ctx context.Context, containerID, dir, why string) error
}

// Snapshots are the ports of time travel; without Records and Files no
// snapshot is taken and rewind and fork at a turn are refused. Without
// State a turn's snapshot keeps its files only.
type Snapshots struct {
	Records SnapshotRecords
	Files   SnapshotFiles
	State   RunningState
}

// enabled tells whether snapshots are configured.
func (s *Service) snapshotsOn() bool {
	return s.d.Snapshots.Records != nil && s.d.Snapshots.Files != nil
}

// retention returns the org's snapshot retention: its quotas
// snapshotsPerThread and snapshotBytesPerThread.
func (s *Service) retention(ctx context.Context, orgID string) snapshot.Retention {
	if s.d.Policies == nil {
		return snapshot.Retention{}
	}
	pol, err := s.d.Policies.OrgPolicy(ctx, orgID)
	if err != nil {
		return snapshot.Retention{}
	}
	q := pol.Quotas()
	return snapshot.Retention{Count: int(q.Limit(org.SnapshotsPerThread)), Bytes: q.Limit(org.SnapshotBytesPerThread)}
}

// snapshotTurn snapshots the thread's files at the end of the turn that
// answered with messageID, then drops the snapshots past the org's
// retention. A snapshot that does not fit the org's storage quota is not
// kept. It never fails the turn: what goes wrong is logged.
func (s *Service) snapshotTurn(ctx context.Context, p user.Principal, th thread.Thread, messageID, baseID string) {
	if !s.snapshotsOn() {
		return
	}
	if _, _, err := s.takeSnapshot(ctx, p, th, snapshot.Snapshot{Kind: snapshot.KindTurn, MessageID: messageID, BaseID: baseID}); err != nil {
		s.log.Warn("files snapshot not taken", "thread", th.ID(), "message", messageID, "cause", err.Error())
	}
}

// takeSnapshot takes and records a snapshot of the thread's files of the
// kind, turn and call sn names, linking the files unchanged since the
// thread's newest snapshot, and applies the org's retention. A start
// snapshot that holds what the newest one holds is not kept: that one is
// returned, with false.
func (s *Service) takeSnapshot(ctx context.Context, p user.Principal, th thread.Thread, sn snapshot.Snapshot) (snapshot.Snapshot, bool, error) {
	recs, files := s.d.Snapshots.Records, s.d.Snapshots.Files
	snaps, err := recs.ThreadSnapshots(ctx, th.ID())
	if err != nil {
		return snapshot.Snapshot{}, false, err
	}
	prev := ""
	if len(snaps) > 0 {
		prev = snaps[len(snaps)-1].ID
	}
	// A thread whose turns never made its container has no files: its
	// snapshot is empty, and taking it makes no container.
	containerID := th.ContainerID()
	if s.d.Containers != nil {
		if _, ok, err := s.d.Containers.Peek(ctx, p, th.ID()); err != nil {
			return snapshot.Snapshot{}, false, err
		} else if ok {
			c, err := s.d.Containers.Scope(ctx, p, th.ID(), true) // its folders prepared
			if err != nil {
				return snapshot.Snapshot{}, false, err
			}
			containerID = c.ID()
		}
	}
	sn.ID, sn.OrgID, sn.ThreadID, sn.TakenAt = id.New("snp"), th.OrgID(), th.ID(), s.now().UTC()
	st, err := files.TakeSnapshot(ctx, th.ID(), sn.ID, prev, containerID)
	if err != nil {
		return snapshot.Snapshot{}, false, err
	}
	if sn.Kind == snapshot.KindStart && (st.Unchanged || prev == "" && st.Files == 0) {
		// The newest snapshot (or, for a thread without any, the empty
		// one) holds the files already.
		_ = files.DropSnapshot(ctx, th.ID(), sn.ID)
		if prev == "" {
			return snapshot.Snapshot{}, false, nil
		}
		return snaps[len(snaps)-1], false, nil
	}
	sn.Files, sn.Size, sn.Bytes = st.Files, st.Size, st.Stored
	if sn.Kind == snapshot.KindTurn && containerID != "" {
		// Its own, shared with no other snapshot: in Size and Bytes.
		n := s.saveState(ctx, th.ID(), sn.ID, containerID)
		sn.Size, sn.Bytes = sn.Size+n, sn.Bytes+n
	}
	if s.d.Quota != nil {
		if err := s.d.Quota.BeforeStore(ctx, th.OrgID(), sn.Bytes); err != nil {
			_ = files.DropSnapshot(ctx, th.ID(), sn.ID)
			return snapshot.Snapshot{}, false, err
		}
	}
	drop, keep := s.retention(ctx, th.OrgID()).Prune(append(snaps, sn))
	if len(keep) == 0 || keep[len(keep)-1].ID != sn.ID {
		_ = files.DropSnapshot(ctx, th.ID(), sn.ID)
		return snapshot.Snapshot{}, false, fault.New(fault.Conflict, "the snapshot alone exceeds the org's snapshotBytesPerThread")
	}
	if err := recs.SaveSnapshot(ctx, keep[len(keep)-1]); err != nil {
		_ = files.DropSnapshot(ctx, th.ID(), sn.ID)
		return snapshot.Snapshot{}, false, err
	}
	if len(drop) > 0 && keep[0].ID != sn.ID {
		// The oldest kept now stores the files it shared with those dropped.
		if err := recs.SaveSnapshot(ctx, keep[0]); err != nil {
			return snapshot.Snapshot{}, false, err
		}
	}
	for _, d := range drop {
		if err := recs.DeleteSnapshot(ctx, d.ID); err != nil {
			return snapshot.Snapshot{}, false, err
		}
		if err := files.DropSnapshot(ctx, th.ID(), d.ID); err != nil {
			return snapshot.Snapshot{}, false, err
		}
	}
	s.log.Debug("files snapshot taken", "thread", th.ID(), "snapshot", sn.ID, "kind", sn.Kind, "call", sn.CallID, "files", st.Files, "bytes", st.Size, "stored", st.Stored, "cloned", st.Cloned)
	return sn, true, nil
}

// saveState saves the running state of the container's sandbox beside
// the turn snapshot snapshotID, where its backend checkpoints, and returns
// the bytes it holds. A state not saved leaves the snapshot with its files
// only: a rewind to it boots the sandbox fresh.
func (s *Service) saveState(ctx context.Context, threadID, snapshotID, containerID string) int64 {
	if s.d.Snapshots.State == nil {
		return 0
	}
	dir, err := s.d.Snapshots.Files.NewStateDir(ctx, threadID, snapshotID)
	if err == nil {
		var saved bool
		if saved, err = s.d.Snapshots.State.SaveState(ctx, containerID, dir); err == nil {
			if !saved {
				return 0
			}
			return s.d.Snapshots.Files.StateBytes(threadID, snapshotID)
		}
	}
	s.log.Warn("running state not saved with the turn's snapshot", "thread", threadID, "snapshot", snapshotID, "cause", err.Error())
	return 0
}

// endSandbox ends the container's sandbox before a rewind puts its files
// back: its processes belong to the turns the rewind folds, and must not
// go on over the earlier files. One that cannot be ended (another server
// keeps it, or its stop fails) refuses the rewind before it changes
// anything, with an answer that says so.
func (s *Service) endSandbox(ctx context.Context, containerID string) error {
	if s.d.Snapshots.State == nil {
		return nil
	}
	if err := s.d.Snapshots.State.EndSandbox(ctx, containerID); err != nil {
		why := "the thread's sandbox could not be stopped; try again shortly"
		if fault.Is(err, fault.Unavailable) {
			why = fault.MessageOf(err)
		}
		return fault.Wrap(fault.Unavailable, "nothing was rewound: "+why, err)
	}
	return nil
}

// restoreState gives the container the running state kept with the turn
// snapshot sn, or, where none is kept, a sandbox booted fresh over the
// restored files, whose next tool result says why (unless why is "").
func (s *Service) restoreState(ctx context.Context, threadID string, sn snapshot.Snapshot, containerID, why string) error {
	if s.d.Snapshots.State == nil {
		return nil
	}
	if err := s.d.Snapshots.State.RestoreState(ctx, containerID, s.d.Snapshots.Files.StateDir(threadID, sn.ID), why); err != nil {
		return fmt.Errorf("workspace: running state: %w", err)
	}
	return nil
}

// restoreFits refuses, with the storage quota's refusal (fault.TooLarge),
// restoring paths (nil: all) of the thread's snapshot snapshotID into the
// container when what the restore adds to the container's files does not
// fit what the org may still store. A restore that adds nothing is never
// refused: it frees space, or leaves it as it is.
func (s *Service) restoreFits(ctx context.Context, orgID, threadID, snapshotID, containerID string, paths []string) error {
	if s.d.Quota == nil {
		return nil
	}
	n, err := s.d.Snapshots.Files.RestoreGrowth(ctx, threadID, snapshotID, containerID, paths)
	if err != nil {
		return fmt.Errorf("workspace: measure the restore: %w", err)
	}
	if n <= 0 {
		return nil
	}
	return s.d.Quota.BeforeStore(ctx, orgID, n)
}

// dropSnapshots removes a thread's snapshots' files (their records go
// with the thread).
func (s *Service) dropSnapshots(ctx context.Context, threadID string) error {
	if !s.snapshotsOn() {
		return nil
	}
	return s.d.Snapshots.Files.DropSnapshots(ctx, threadID)
}

// SweepSnapshots removes the snapshots' files of threads that no longer
// exist (a thread deleted while its folder could not be removed, or by a
// server that died first), and returns how many threads' it removed.
func (s *Service) SweepSnapshots(ctx context.Context) (int, error) {
	if !s.snapshotsOn() {
		return 0, nil
	}
	ids, err := s.d.Snapshots.Files.SnapshotThreads(ctx)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	exist, err := s.d.Snapshots.Records.ThreadsExist(ctx, ids)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if exist[id] {
			continue
		}
		if err := s.d.Snapshots.Files.DropSnapshots(ctx, id); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Rewound is what a rewind did.
type Rewound struct {
	Thread     thread.Thread
	MessageID  string   // the assistant message the thread went back to
	SnapshotID string   // the snapshot its files came from
	Replaced   []string // the messages folded as an earlier version
	Files      int      // the files the container holds now
	// Note says, in one line, what of the turn the rewind could not give
	// back: its running state ("" when the rewind is whole).
	Note string
}

// RewindThread takes one of the caller's threads back to the turn that
// answered with messageID: its container's files become that turn's
// snapshot, and the messages after it an earlier version, as an edit or
// a regenerate makes them. It is refused while a turn of the thread runs
// (on any server), and when the files it gives back would take the org
// past its storage quota; it is recorded in the org's audit log.
func (s *Service) RewindThread(ctx context.Context, p user.Principal, threadID, messageID string) (Rewound, error) {
	th, err := s.holdFiles(ctx, p, threadID, "a turn is running in this thread (or another rewind): stop it or wait for it to end, then rewind")
	if err != nil {
		return Rewound{}, err
	}
	hold := &threadHold{s: s, id: th.ID()}
	defer hold.release()
	msgs, err := s.store.Messages(ctx, th.ID())
	if err != nil {
		return Rewound{}, err
	}
	at, err := turnAt(msgs, messageID)
	if err != nil {
		return Rewound{}, err
	}
	sn, err := s.turnSnapshot(ctx, th.ID(), messageID)
	if err != nil {
		return Rewound{}, err
	}
	c, err := s.d.Containers.Scope(ctx, p, th.ID(), true)
	if err != nil {
		return Rewound{}, err
	}
	if err := s.restoreFits(ctx, th.OrgID(), th.ID(), sn.ID, c.ID(), nil); err != nil {
		return Rewound{}, err
	}
	if err := s.endSandbox(ctx, c.ID()); err != nil {
		return Rewound{}, err
	}
	// From the restore on, the rewind outlives a client that goes away,
	// and a failed write after it is retried (finishRestore): files
	// restored under a history left unfolded would disagree with it.
	ctx = context.WithoutCancel(ctx)
	if err := s.d.Snapshots.Files.RestoreSnapshot(ctx, th.ID(), sn.ID, c.ID()); err != nil {
		return Rewound{}, fmt.Errorf("workspace: rewind: %w", err)
	}
	// The files are the turn's now, so the history is folded to match
	// them whatever becomes of the running state: one not put back (a
	// sandbox booted since endSandbox that cannot be ended) is logged and
	// told in the answer, as a lost checkpoint is told.
	note := ""
	if err := s.restoreState(ctx, th.ID(), sn, c.ID(), "the thread went back to a turn whose running state was not kept"); err != nil {
		s.log.Warn("rewind: running state not put back; the history is folded to match the restored files", "thread", th.ID(), "snapshot", sn.ID, "cause", err.Error())
		note = "The files and the history went back to the turn, but its running state was not put back (" + fault.FirstLine(err) + "): the sandbox's processes, terminals and variables are not the turn's."
	}
	// Outputs found again are announced as new artifacts only if they
	// change: forget what was captured, as a fresh container would.
	s.mu.Lock()
	delete(s.seen, th.ID())
	s.mu.Unlock()
	var folded []string
	for _, m := range msgs[at+1:] {
		if !m.Replaced() {
			folded = append(folded, m.ID())
		}
	}
	th = th.Touch(s.now())
	err = s.finishRestore(ctx, hold, "rewind",
		func(ctx context.Context) error {
			if err := s.store.ReplaceMessages(ctx, th.ID(), folded); err != nil {
				return fmt.Errorf("workspace: rewind: %w", err)
			}
			return nil
		},
		func(ctx context.Context) error {
			_ = s.store.UpdateThread(ctx, th) // its activity time alone
			return nil
		},
		s.auditStep(s.auditEvent(p, "thread.rewind", th.ID(), nil, map[string]any{"message_id": messageID, "snapshot_id": sn.ID, "replaced": len(folded)})))
	if err != nil {
		return Rewound{}, err
	}
	out := Rewound{Thread: th, MessageID: messageID, SnapshotID: sn.ID, Replaced: folded, Files: sn.Files, Note: note}
	if folded == nil {
		out.Replaced = []string{}
	}
	return out, nil
}

// turnAt returns the index in msgs of the assistant message messageID, a
// turn a rewind or a fork may go back to: one of the thread's, not an
// earlier version.
func turnAt(msgs []thread.Message, messageID string) (int, error) {
	if messageID == "" {
		return 0, fault.New(fault.Invalid, "message_id: required (an assistant message of the thread)")
	}
	for i, m := range msgs {
		if m.ID() != messageID {
			continue
		}
		switch {
		case m.Role() != thread.Assistant:
			return 0, fault.Errorf(fault.Invalid, "message_id: %s is a %s message; name an assistant message of the thread", messageID, m.Role())
		case m.Replaced():
			return 0, fault.Errorf(fault.Conflict, "message_id: %s is an earlier version, no longer in the thread's history", messageID)
		}
		return i, nil
	}
	return 0, fault.Errorf(fault.NotFound, "message_id: %s is not a message of this thread", messageID)
}

// turnSnapshot returns the snapshot of the turn that answered with
// messageID, or a conflict saying none is kept.
func (s *Service) turnSnapshot(ctx context.Context, threadID, messageID string) (snapshot.Snapshot, error) {
	sn, err := s.d.Snapshots.Records.MessageSnapshot(ctx, threadID, messageID)
	if fault.Is(err, fault.NotFound) {
		return snapshot.Snapshot{}, fault.Errorf(fault.Conflict, "no files snapshot of the turn %s is kept (a turn that did not end, or one past the org's snapshot retention)", messageID)
	}
	return sn, err
}
