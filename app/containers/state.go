package containers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/fault"
	"threadbox/domain/sandbox"
)

// Running state kept beside a thread's files snapshots, for time travel.
// SaveState writes a state folder: the checkpoint the sandbox's backend
// takes of it while it goes on running (sandbox.Backend.CheckpointRunning)
// in image/, and the backend's name in the file backend. RestoreState puts
// such a folder back as the container's checkpoint, so that the next use
// of the container restores it in place of the sandbox that ran before.

// stateBackendFile names the file of a state folder that names the
// backend that took it.
const stateBackendFile = "backend"

// stateImage names the folder of a state folder that holds the image.
const stateImage = "image"

// SaveState saves the running state of the container's sandbox into dir,
// an empty host folder, and leaves the sandbox running. It reports false,
// saving nothing, when no sandbox of the container runs in this process,
// a command runs in it, or its backend cannot checkpoint. The loopback
// listeners the boot hooks made (the in-sandbox API bridge) are made
// again.
func (s *Service) SaveState(ctx context.Context, containerID, dir string) (bool, error) {
	unlock, err := s.lockFor(ctx, containerID)
	if err != nil {
		return false, err
	}
	defer unlock()
	l, busy := s.held(containerID)
	if l == nil || busy || !l.backend.Checkpoints(ctx).Supported {
		return false, nil
	}
	image := filepath.Join(dir, stateImage)
	if err := os.Mkdir(image, 0o700); err != nil {
		return false, fmt.Errorf("containers: save state: %w", err)
	}
	err = l.backend.CheckpointRunning(ctx, containerID, image)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, stateBackendFile), []byte(l.backend.Name()), 0o600)
	}
	// Holding the sandbox for the checkpoint ended its listeners.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, h := range s.hooks {
		if herr := h(hctx, s, containerID); herr != nil {
			s.log.Warn("sandbox boot hook failed after saving its state", "container", containerID, "backend", l.backend.Name(), "cause", herr.Error())
		}
	}
	if err != nil {
		_ = os.RemoveAll(image)
		_ = os.Remove(filepath.Join(dir, stateBackendFile))
		if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrNotFound) {
			s.failed(containerID, l, "save state", err)
		}
		return false, fmt.Errorf("containers: save state: %w", err)
	}
	return true, nil
}

// EndSandbox ends the container's sandbox before its files go back to an
// earlier state, so that none of its processes sees them change or comes
// back over them: the sandbox that runs now stops (on another server of a
// scaled-out deployment, it is handed over first) and the checkpoint its
// stop or hand-over took is dropped. It fails when the holder keeps the
// sandbox, the stop fails or the checkpoint cannot be dropped; the caller
// then leaves the files as they are, and the sandbox, if it still runs,
// goes on over them.
func (s *Service) EndSandbox(ctx context.Context, containerID string) error {
	unlock, err := s.lockFor(ctx, containerID)
	if err != nil {
		return err
	}
	defer unlock()
	return s.endLocked(ctx, containerID)
}

// endLocked is EndSandbox under the container's lock.
func (s *Service) endLocked(ctx context.Context, id string) error {
	// Another server holding it hands it over first.
	lease := func(ctx context.Context, id string) error {
		if _, err := s.acquire(ctx, id); errors.Is(err, errKept) {
			return errElsewhere(id)
		} else if err != nil {
			return fmt.Errorf("containers: end the sandbox: %w", err)
		}
		return nil
	}
	if err := s.stopUnheld(ctx, id, lease); err != nil {
		return err
	}
	if err := s.stopLocked(ctx, id); err != nil {
		return err
	}
	if s.ckpt.folders == nil {
		return nil
	}
	// A checkpoint taken at the stop, or at a hand-over, is of the
	// running state given up.
	if err := s.ckpt.folders.DropCheckpoint(ctx, id); err != nil {
		return fmt.Errorf("containers: end the sandbox: %w", err)
	}
	return nil
}

// stopUnheld, when this process does not hold the container's sandbox,
// takes its lease with lease and stops the sandbox the container's record
// says runs although no process holds it (an earlier stop of it failed,
// or its server went): it may run still, so a stop its backend fails is
// an error here, and the lease goes back, where stopLocked, not knowing
// which backend has it, asks every backend and heeds none. The caller
// holds the container's lock.
func (s *Service) stopUnheld(ctx context.Context, id string, lease func(context.Context, string) error) error {
	if l, _ := s.held(id); l != nil {
		return nil
	}
	if err := lease(ctx, id); err != nil {
		return err
	}
	if err := s.stopRecorded(ctx, id); err != nil {
		s.giveBack(id)
		return err
	}
	return nil
}

// stopRecorded stops the container's sandbox on the backend its record
// names, when the record says it runs.
func (s *Service) stopRecorded(ctx context.Context, id string) error {
	c, err := s.store.Container(ctx, id)
	if fault.Is(err, fault.NotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("containers: stop: %w", err)
	}
	if c.State() != container.Running {
		return nil
	}
	for _, b := range s.backends {
		if b.Name() != c.Backend() {
			continue
		}
		if err := b.Stop(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("containers: stop: %w", err)
		}
	}
	return nil
}

// RestoreState takes the container's sandbox back to the state saved in
// dir by SaveState: the sandbox that runs now ends as EndSandbox ends it
// and the state becomes the container's checkpoint, which its next use
// restores. A dir without a saved state ("" or empty) ends the sandbox
// all the same, and its next tool result says the sandbox started fresh,
// for why (unless why is "").
func (s *Service) RestoreState(ctx context.Context, containerID, dir, why string) error {
	unlock, err := s.lockFor(ctx, containerID)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.endLocked(ctx, containerID); err != nil {
		return err
	}
	fresh := func() error {
		if why != "" {
			s.ckpt.note(containerID, why)
		}
		return nil
	}
	if s.ckpt.folders == nil {
		return fresh()
	}
	name, err := os.ReadFile(filepath.Join(dir, stateBackendFile))
	if dir == "" || errors.Is(err, os.ErrNotExist) {
		return fresh()
	}
	// A state that cannot be read is put back as one that cannot be
	// linked: the sandbox has stopped, so it boots fresh with the note.
	var to string
	if err == nil {
		to, err = s.ckpt.folders.EmptyCheckpoint(ctx, containerID)
	}
	if err == nil {
		err = linkTree(filepath.Join(dir, stateImage), to)
	}
	if err == nil {
		err = s.ckpt.folders.SealCheckpoint(ctx, containerID, strings.TrimSpace(string(name)))
	}
	if err != nil {
		// The files are back: the sandbox boots fresh over them, and its
		// next tool result says why.
		s.log.Warn("running state not put back: the sandbox boots fresh", "container", containerID, "cause", err.Error())
		_ = s.ckpt.folders.DropCheckpoint(context.WithoutCancel(ctx), containerID)
		s.ckpt.note(containerID, "its saved state could not be put back: "+fault.FirstLine(err))
		return nil
	}
	s.ckpt.clearNote(containerID)
	return nil
}

// linkTree fills the folder to with hard links to the regular files under
// from (a checkpoint image is only ever read): both are under the
// server's data folder, on one file system.
func linkTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil || rel == "." {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(dst, 0o700)
		case d.Type().IsRegular():
			return os.Link(path, dst)
		}
		return nil
	})
}
