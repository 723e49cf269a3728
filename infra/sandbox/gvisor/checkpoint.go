package gvisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
)

// Checkpoints of gVisor sandboxes. Checkpoint holds the agent's connection
// between frames (agent.Client.Hold), has runsc save the sandbox into the
// folder (runsc checkpoint, uncompressed; the sandbox ends with it) and
// writes beside it what the checkpoint was taken with
// (boxes.CheckpointRecordFile). Restore
// compares that with this server (sandbox.CheckpointImage.Mismatch: the
// same runsc build and flags, root filesystem folder, agent binary and
// folder targets) and boots the sandbox from the folder under a new runsc
// container (runsc restore), with new pipes: its processes, their memory,
// open files, terminals, loopback connections and /tmp go on. When this
// process took the checkpoint, its agent client goes on over the new pipes
// (agent.Client.Resume), so the sessions it started (interpreters,
// terminals) are still its own; a later process releases the restored
// agent with a client of its own (agent.Client.Release).

// Checkpoints answers that sandboxes are checkpointed where runsc can run
// them, naming the runsc build; otherwise files only, and why.
func (b *Backend) Checkpoints(ctx context.Context) sandbox.CheckpointSupport {
	if err := b.Available(ctx); err != nil {
		return sandbox.FilesOnly("files only: the backend cannot run here: " + err.Error())
	}
	v, _ := b.runscVersion()
	return sandbox.CheckpointSupport{Supported: true, Mechanism: "gVisor checkpoint and restore, uncompressed (" + v + ")"}
}

// image returns what a checkpoint of a sandbox with mounts is taken with
// on this server.
func (b *Backend) image(mounts []sandbox.Mount) (sandbox.CheckpointImage, error) {
	v, err := b.runscVersion()
	if err != nil {
		return sandbox.CheckpointImage{}, err
	}
	sum, err := b.digest.Of(b.cfg.AgentBin)
	if err != nil {
		return sandbox.CheckpointImage{}, err
	}
	return sandbox.CheckpointImage{Backend: b.Name(), Runtime: v, RootFS: b.rootfs, Agent: sum, Targets: sandbox.TargetsOf(mounts)}, nil
}

// save checkpoints the running sandbox id, box bx, into dir and writes
// what the checkpoint was taken with beside runsc's image (boxes.Saves
// calls it with id's lock held). Unless leaveRunning, the sandbox stops,
// and its agent connection is kept for a Restore by this process; on an
// error before runsc saved anything the sandbox serves on, after, it has
// ended. With leaveRunning the sandbox goes on (runsc checkpoint
// --leave-running): its agent connection resumes and its processes never
// notice. A later Restore from dir boots the sandbox as it was here, with
// a client of its own (agent.Client.Release).
func (b *Backend) save(ctx context.Context, id string, bx *box, dir string, leaveRunning bool) error {
	img, err := b.image(bx.mounts)
	if err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	start := time.Now()
	if err := bx.Client.Hold(ctx); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	args := []string{"checkpoint", "--compression=none", "--image-path", dir}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	_, err = b.runscOut(context.WithoutCancel(ctx), append(args, bx.cid)...)
	if err != nil || leaveRunning {
		select {
		case <-bx.Done():
		default:
			// The sandbox runs (nothing was saved, or it was left
			// running): it serves on over the same connection.
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if rerr := bx.Client.Resume(rctx, nil); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	took := time.Since(start)
	if !leaveRunning {
		// runsc checkpoint ends the sandbox; its runsc process follows.
		bx.awaitEnd(ctx)
		select {
		case <-bx.Done():
		default:
			bx.Kill()
			<-bx.Done()
		}
		b.boxes.Take(id)
	}
	if err := b.held.Record(id, dir, img, bx.Client, !leaveRunning); err != nil {
		return fmt.Errorf("gvisor: checkpoint %s: %w", id, err)
	}
	// A restore of it will find a container ready to restore into.
	b.prepareReady(bx.mounts, bx.limits)
	b.log.Info("sandbox checkpointed", "id", id, "container", bx.cid, "left_running", leaveRunning, "took", took.String(), "bytes", hostdirs.TreeBytes(dir))
	return nil
}

// Restore boots the sandbox of spec.ID from the checkpoint in dir unless
// it runs. A checkpoint taken with anything else than this server has, or
// one runsc cannot restore, is sandbox.ErrCheckpointIncompatible.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	if err := b.Checkpoints(ctx).Err(); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	err := b.boxes.Ensure(ctx, spec, b.cfg.Dirs, func(ctx context.Context, spec sandbox.Spec) (*box, error) {
		m, err := boxes.ReadCheckpointRecord(dir)
		if err != nil {
			b.held.Drop(spec.ID)
			return nil, err
		}
		now, err := b.image(spec.Mounts)
		if err != nil {
			return nil, err
		}
		if err := m.Image.Mismatch(now); err != nil {
			b.held.Drop(spec.ID)
			return nil, err
		}
		bx, err := b.start(ctx, spec, dir, "", true)
		if errors.Is(err, errReadyFailed) {
			b.log.Warn("restore into the ready gVisor sandbox failed; restoring into a new one", "id", spec.ID, "cause", err.Error())
			bx, err = b.start(ctx, spec, dir, "", false)
		}
		if err != nil {
			b.held.Drop(spec.ID)
			return nil, fmt.Errorf("%w: %w", sandbox.ErrCheckpointIncompatible, err)
		}
		return bx, nil
	})
	if err != nil {
		return fmt.Errorf("gvisor: restore: %w", err)
	}
	return nil
}
