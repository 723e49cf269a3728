package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"threadbox/app/files"
	"threadbox/domain/fault"
	"threadbox/domain/file"
	"threadbox/domain/id"
	"threadbox/domain/sandbox"
	"threadbox/domain/snapshot"
	"threadbox/domain/thread"
	"threadbox/domain/user"
)

// The thread file use cases are the Files API's (app/files) with the thread
// id as scope: the same key rules, streaming and policy (uploads need
// uploads.enabled, outputs need downloads.generated, uploads need
// downloads.uploaded). The thread is looked up first, so another user's
// thread is not found before anything is read or written.

func (s *Service) ownThread(ctx context.Context, p user.Principal, threadID string) (thread.Thread, error) {
	if s.d.Files == nil {
		return thread.Thread{}, fault.New(fault.Unavailable, "thread files are not configured")
	}
	return s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
}

// UploadFile stores an upload into the thread's container: at its key (the
// optional path) or its file name, under /mnt/user-data/uploads/. A
// key naming the outputs folder is refused: outputs are what code made
// (put-file may write there). The request's scope is the thread.
func (s *Service) UploadFile(ctx context.Context, p user.Principal, threadID string, req files.UploadRequest) (files.File, error) {
	th, err := s.ownThread(ctx, p, threadID)
	if err != nil {
		return files.File{}, err
	}
	key := req.Key
	if key == "" {
		key = req.Filename
	}
	if m, _, err := file.KeyLocation(key); err == nil && m != file.Uploads {
		return files.File{}, fault.Errorf(fault.Invalid, "upload-file stores into /mnt/user-data/uploads/: path %q names the outputs folder (put-file writes there)", key)
	}
	req.ScopeID = th.ID()
	return s.d.Files.Upload(ctx, p, req)
}

// PutFile stores a raw body at key in the thread's container.
func (s *Service) PutFile(ctx context.Context, p user.Principal, threadID, key string, body io.Reader, limit int64) (files.File, error) {
	th, err := s.ownThread(ctx, p, threadID)
	if err != nil {
		return files.File{}, err
	}
	return s.d.Files.Put(ctx, p, th.ID(), key, body, limit)
}

// DownloadFile opens a file of the thread's container by sandbox path.
// Only uploads and outputs are served; any other path is refused.
func (s *Service) DownloadFile(ctx context.Context, p user.Principal, threadID, sandboxPath string) (files.Content, error) {
	th, err := s.ownThread(ctx, p, threadID)
	if err != nil {
		return files.Content{}, err
	}
	loc, err := file.DefaultTable().Resolve(sandboxPath)
	if err != nil || (loc.Mount != file.Uploads && loc.Mount != file.Outputs) || loc.Rel == "." {
		return files.Content{}, fault.Errorf(fault.Invalid,
			"path %q is refused: download-file serves files under %s/ and %s/ only", sandboxPath, sandbox.UploadsDir, sandbox.OutputsDir)
	}
	return s.d.Files.OpenPath(ctx, p, th.ID(), loc.Path)
}

// DeleteThread deletes one of the caller's threads and its messages, stops
// its sandbox and deletes its files. Its artifacts stay in the project.
func (s *Service) DeleteThread(ctx context.Context, p user.Principal, threadID string) error {
	th, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return err
	}
	// Its running turn ends first: it must not go on without its thread.
	if s.d.Turns != nil {
		if err := s.d.Turns.EndThread(ctx, th.ID()); err != nil {
			return err
		}
	}
	if err := s.removeSandbox(ctx, th); err != nil {
		return err
	}
	return s.store.DeleteThread(ctx, p.OrgID, p.UserID, th.ID())
}

// removeSandbox removes a thread's container (its sandbox and files) and
// what the service remembers of its outputs; the thread is the caller's to
// delete.
func (s *Service) removeSandbox(ctx context.Context, th thread.Thread) error {
	if s.d.Containers != nil {
		if err := s.d.Containers.Remove(ctx, th.ContainerID()); err != nil {
			return fmt.Errorf("workspace: remove the container of thread %s: %w", th.ID(), err)
		}
	}
	if err := s.dropSnapshots(ctx, th.ID()); err != nil {
		return fmt.Errorf("workspace: remove the snapshots of thread %s: %w", th.ID(), err)
	}
	s.mu.Lock()
	delete(s.seen, th.ID())
	s.mu.Unlock()
	return nil
}

// forkMounts are the folders a fork copies.
var forkMounts = []string{sandbox.WorkspaceDir, sandbox.UploadsDir, sandbox.OutputsDir}

// ForkThread makes a new thread in the same project with a copy of one of
// the caller's threads: its complete messages and its files (workspace,
// uploads and outputs). Artifacts are not copied: they belong to the
// project already. The copy counts toward the org's storage quota: the
// messages' and files' bytes are measured first (a sparse file's data,
// not its size, where files are copied by their data), and a
// fork that does not fit is refused before anything is made; the files
// are then copied within the bytes measured.
//
// With messageID, an assistant message of the thread, the fork is of the
// thread as that turn left it: its messages up to that one, and the files
// of that turn's snapshot.
//
// Until it is whole the new thread is marked as a fork being made, which
// no listing shows, and the fork holds a lease of its own: a fork whose
// server died while it copied is removed by SweepUnfinishedForks, and one
// that failed is deleted at once.
func (s *Service) ForkThread(ctx context.Context, p user.Principal, threadID, messageID string) (thread.Thread, error) {
	src, err := s.store.Thread(ctx, p.OrgID, p.UserID, threadID)
	if err != nil {
		return thread.Thread{}, err
	}
	if messageID != "" && !s.snapshotsOn() {
		return thread.Thread{}, fault.New(fault.Unavailable, "thread files snapshots are not available on this server: fork the whole thread")
	}
	title := "Fork of " + src.Title()
	if len(title) > 500 {
		title = title[:500]
		for !utf8.ValidString(title) { // cut at a character's start
			title = title[:len(title)-1]
		}
	}
	dst, err := thread.New(id.New("thr"), p.OrgID, src.ProjectID(), p.UserID, title, s.now())
	if err != nil {
		return thread.Thread{}, err
	}
	dst = dst.AsFork()
	msgs, err := s.store.Messages(ctx, src.ID())
	if err != nil {
		return thread.Thread{}, err
	}
	var (
		files forkSource
		snap  snapshot.Snapshot
	)
	if messageID == "" {
		if files, err = s.forkFiles(ctx, p, src); err != nil {
			return thread.Thread{}, err
		}
	} else {
		at, err := turnAt(msgs, messageID)
		if err != nil {
			return thread.Thread{}, err
		}
		if snap, err = s.turnSnapshot(ctx, src.ID(), messageID); err != nil {
			return thread.Thread{}, err
		}
		msgs, files.bytes = msgs[:at+1], snap.Size
	}
	if s.d.Quota != nil {
		n := files.bytes
		for _, m := range msgs {
			n += int64(len(m.Content()) + len(m.Usage()))
		}
		if err := s.d.Quota.BeforeStore(ctx, p.OrgID, n); err != nil {
			return thread.Thread{}, err
		}
	}
	if ok, err := s.d.Leases.Acquire(ctx, forkLease(dst.ID())); err != nil || !ok {
		return thread.Thread{}, cmp.Or(err, fmt.Errorf("workspace: fork: the new thread's lease %s is taken", dst.ID()))
	}
	defer func() { _ = s.d.Leases.Release(context.WithoutCancel(ctx), forkLease(dst.ID())) }()
	if err := s.store.CreateThread(ctx, dst); err != nil {
		return thread.Thread{}, err
	}
	fail := func(err error) (thread.Thread, error) {
		_ = s.DeleteThread(context.WithoutCancel(ctx), p, dst.ID())
		return thread.Thread{}, err
	}
	// Every message is copied as it is, an interrupted answer too (with
	// why it ended): dropping it would leave two user messages in a row;
	// a replaced one stays replaced.
	for _, m := range msgs {
		c, err := thread.NewMessage(id.New("msg"), dst.ID(), m.Role(), m.Content(), m.Complete(), m.CreatedAt())
		if err != nil {
			return fail(err)
		}
		c = thread.RestoreMessage(c.ID(), c.ThreadID(), 0, c.Role(), c.Content(), m.Usage(), m.Complete(), c.CreatedAt(), m.Ended()).WithReplaced(m.Replaced())
		if _, err := s.store.AppendMessage(ctx, c); err != nil {
			return fail(err)
		}
	}
	if len(files.paths) > 0 {
		if err := s.copyFiles(ctx, p, files, dst); err != nil {
			return fail(err)
		}
	}
	if snap.ID != "" {
		to, err := s.d.Containers.Scope(ctx, p, dst.ID(), true)
		if err != nil {
			return fail(err)
		}
		if err := s.d.Snapshots.Files.RestoreSnapshot(ctx, src.ID(), snap.ID, to.ID()); err != nil {
			return fail(fmt.Errorf("workspace: fork at a turn: %w", err))
		}
		if err := s.restoreState(ctx, src.ID(), snap, to.ID(), ""); err != nil {
			return fail(fmt.Errorf("workspace: fork at a turn: %w", err))
		}
	}
	if err := s.store.FinishFork(ctx, p.OrgID, p.UserID, dst.ID()); err != nil {
		return fail(err)
	}
	return dst.Forked(), nil
}

// forkLease names the lease a fork is made under.
func forkLease(threadID string) string { return "fork:" + threadID }

// SweepUnfinishedForks deletes, with their messages and files, the forks
// whose making stopped before they were whole (their server died or was
// killed while it copied), and returns how many. A fork whose lease a
// server holds is still being made and is left alone.
func (s *Service) SweepUnfinishedForks(ctx context.Context) (int, error) {
	forks, err := s.store.UnfinishedForks(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range forks {
		name := forkLease(t.ID())
		if mine, other, err := s.d.Leases.Holds(ctx, name); err != nil || mine || other {
			if err != nil {
				return n, err
			}
			continue
		}
		ok, err := s.d.Leases.Acquire(ctx, name)
		if err != nil {
			return n, err
		}
		if !ok {
			continue
		}
		dropped, err := s.dropUnfinishedFork(ctx, t)
		_ = s.d.Leases.Release(context.WithoutCancel(ctx), name)
		if err != nil {
			return n, fmt.Errorf("workspace: remove the unfinished fork %s: %w", t.ID(), err)
		}
		if dropped {
			n++
		}
	}
	return n, nil
}

// dropUnfinishedFork deletes the fork t under its lease, unless it was
// made (or deleted) since it was listed.
func (s *Service) dropUnfinishedFork(ctx context.Context, t thread.Thread) (bool, error) {
	cur, err := s.store.Thread(ctx, t.OrgID(), t.OwnerID(), t.ID())
	if fault.Is(err, fault.NotFound) {
		return false, nil
	}
	if err != nil || !cur.Forking() {
		return false, err
	}
	err = s.DeleteThread(ctx, user.Principal{OrgID: t.OrgID(), UserID: t.OwnerID()}, t.ID())
	if fault.Is(err, fault.NotFound) {
		return false, nil
	}
	return err == nil, err
}

// forkSource is what a fork copies of its source thread's container: the
// sandbox paths of its files and the bytes their copies store, as listed.
type forkSource struct {
	containerID string
	paths       []string
	bytes       int64
}

// forkFiles lists the source thread's files.
func (s *Service) forkFiles(ctx context.Context, p user.Principal, src thread.Thread) (forkSource, error) {
	if s.d.Containers == nil || s.d.Container == nil {
		return forkSource{}, nil
	}
	from, err := s.d.Containers.Scope(ctx, p, src.ID(), true)
	if err != nil {
		return forkSource{}, err
	}
	out := forkSource{containerID: from.ID()}
	table := file.DefaultTable()
	for _, dir := range forkMounts {
		infos, err := s.d.Container.Walk(ctx, from.ID(), dir)
		if errors.Is(err, file.ErrNotFound) {
			continue
		}
		if err != nil {
			return forkSource{}, fmt.Errorf("workspace: fork: list %s: %w", dir, err)
		}
		loc, err := table.Resolve(dir)
		if err != nil {
			return forkSource{}, fmt.Errorf("workspace: fork: %w", err)
		}
		for _, info := range infos {
			if info.Dir {
				continue
			}
			if p, ok := table.Path(loc.Mount, info.Rel); ok {
				out.paths = append(out.paths, p)
				out.bytes += info.Data()
			}
		}
	}
	return out, nil
}

// copyFiles copies the listed files into the fork's container, all of
// them within the bytes they held when listed: a file the source's
// sandbox grew meanwhile fails the fork rather than pass what the quota
// admitted.
func (s *Service) copyFiles(ctx context.Context, p user.Principal, src forkSource, dst thread.Thread) error {
	to, err := s.d.Containers.Scope(ctx, p, dst.ID(), true)
	if err != nil {
		return err
	}
	left := src.bytes
	for _, path := range src.paths {
		n, err := s.copyFile(ctx, src.containerID, to.ID(), path, left)
		if err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// copyFile copies one file, at most limit bytes (of data, where the files
// are copied by their data), and returns what the copy stores.
func (s *Service) copyFile(ctx context.Context, from, to, p string, limit int64) (int64, error) {
	_, n, err := s.d.Container.CopyFile(ctx, from, to, p, limit)
	if errors.Is(err, file.ErrNotFound) {
		return 0, nil // removed meanwhile
	}
	return n, copyErr(p, err)
}

// copyErr explains why the copy of the file at p failed (nil: it did not).
func copyErr(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, file.ErrTooLarge) && !errors.Is(err, file.ErrDiskFull):
		return fault.Errorf(fault.Conflict, "the thread's files grew while they were copied (%s); fork it again", p)
	}
	return fmt.Errorf("workspace: fork: write %s: %w", p, err)
}
