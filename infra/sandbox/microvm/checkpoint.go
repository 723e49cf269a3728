package microvm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent/protocol"
	"threadbox/infra/sandbox/boxes"
	"threadbox/infra/sandbox/hostdirs"
	"threadbox/infra/sandbox/microvm/guestinit"
)

// Checkpoints of microVMs. A container's VM serves its root filesystem
// and folders over virtiofs (virtiofs.go), so QEMU can save it running.
// Checkpoint holds the agent's connection between frames
// (agent.Client.Hold), pauses the VM, has QEMU write its state (CPUs,
// devices, and virtiofsd's record of the guest's open files) into the
// folder (stateFile) and copies the pages of its memory file beside it
// (ramFile, vmram.go), then ends the VM or, for CheckpointRunning, lets it
// go on. Restore compares what the checkpoint was taken with
// (boxes.CheckpointRecordFile: QEMU's version, the guest artefacts, the
// accelerator, the VM's size, the root filesystem, the agent, the folder
// targets) with this server, starts QEMU and new virtiofsd processes over
// the container's folders (sources may differ, targets may not), loads
// the state, and releases the agent with the host's clock and a random
// seed (the guest's clock stood still while saved, and a restored guest
// must not repeat the random bytes of another restore of the same state).
// The agent client of the VM goes on when this process took the
// checkpoint, so its sessions are still its own. Warm VMs (from the
// template, or booted over a slot) have 9p shares, which QEMU cannot
// save mounted: their checkpoint fails, and they keep files only.

// The files of a checkpoint's folder: the VM's saved state (without its
// RAM), and its RAM.
const (
	stateFile = "vm.state"
	ramFile   = "vm.ram"
)

// Checkpoints answers that VMs booted for a container are checkpointed
// where the backend runs and its guest has virtiofs; otherwise files only,
// and why.
func (b *Backend) Checkpoints(ctx context.Context) sandbox.CheckpointSupport {
	if err := b.Available(ctx); err != nil {
		return sandbox.FilesOnly("files only: the backend cannot run here: " + err.Error())
	}
	g, err := LoadGuest(b.cfg.Guest, b.cfg.Kernel)
	if err != nil {
		return sandbox.FilesOnly("files only: " + err.Error())
	}
	if !b.virtiofsOK(g) {
		return sandbox.FilesOnly("files only: QEMU saves no VM while a 9p share is mounted in it, and without virtiofsd (`make microvm-guest` fetches it) or a guest with virtiofs the shares are 9p")
	}
	return sandbox.CheckpointSupport{Supported: true, Mechanism: "QEMU saves the VM (" + b.qemuVersion() +
		"), virtiofsd the paths of the files the guest has open; a warm VM keeps files only until its first checkpoint fails and it boots again"}
}

// qemuVersion returns the first line of QEMU's --version, read once.
func (b *Backend) qemuVersion() string {
	b.versionOnce.Do(func() {
		out, err := exec.Command(b.cfg.QEMU, "--version").Output()
		if err != nil {
			b.version = "QEMU of unknown version"
			return
		}
		b.version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	})
	return b.version
}

// image returns what a checkpoint of bx is taken with on this server.
func (b *Backend) image(g Guest, sh []share, l sandbox.Limits) (sandbox.CheckpointImage, error) {
	sum, err := b.digest.Of(b.cfg.AgentBin)
	if err != nil {
		return sandbox.CheckpointImage{}, err
	}
	b.availMu.Lock()
	accel := b.accel
	b.availMu.Unlock()
	mounts := make([]sandbox.Mount, len(sh))
	for i, m := range sh {
		mounts[i] = m.Mount
	}
	runtime := fmt.Sprintf("%s; %s, CPU %s; guest %s, kernel %s; %d MiB, %d vCPUs", b.qemuVersion(), accel, cpuModel(accel), g.Dir, g.Kernel,
		max(l.MemoryBytes, MinMemoryBytes)>>20, vcpus(l.CPUs))
	return sandbox.CheckpointImage{Backend: b.Name(), Runtime: runtime, RootFS: b.rootfs, Agent: sum, Targets: sandbox.TargetsOf(mounts)}, nil
}

// save checkpoints the running VM id, box bx, into dir and writes what
// the checkpoint was taken with beside its state (boxes.Saves calls it
// with id's lock held). The VM pauses while its state is written. Unless
// leaveRunning, the VM then ends, and its agent connection is kept for a
// Restore by this process; on an error before QEMU saved anything the VM
// serves on. With leaveRunning the VM goes on and its agent connection
// resumes. A later Restore from dir boots the VM as it was here.
func (b *Backend) save(ctx context.Context, id string, bx *box, dir string, leaveRunning bool) error {
	if bx.fs != guestinit.FSVirtiofs {
		return fmt.Errorf("%s: checkpoint %s: %w", b.cfg.Name, id, errNotVirtiofs)
	}
	img, err := b.image(bx.guest, bx.shares, bx.limits)
	if err != nil {
		return fmt.Errorf("%s: checkpoint %s: %w", b.cfg.Name, id, err)
	}
	start := time.Now()
	if err := bx.Client.Hold(ctx); err != nil {
		return fmt.Errorf("%s: checkpoint %s: %w", b.cfg.Name, id, err)
	}
	sctx := context.WithoutCancel(ctx)
	_, err = bx.qmp.exec(sctx, "stop", nil)
	if err == nil {
		// The state without the RAM, then the RAM's pages, the VM paused.
		err = bx.qmp.save(sctx, filepath.Join(dir, stateFile), true)
	}
	if err == nil {
		err = bx.ram.saveTo(filepath.Join(dir, ramFile))
	}
	if err != nil || leaveRunning {
		// Nothing was saved, or the VM is left running: it goes on and
		// serves over the same connection.
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Its clock stood still while it was paused: it goes on from the
		// host's.
		if _, cerr := bx.qmp.exec(rctx, "cont", nil); cerr != nil {
			err = errors.Join(err, cerr)
		} else if rerr := bx.Client.ResumeWith(rctx, nil, protocol.Release{ClockUnixNano: time.Now().UnixNano()}); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: checkpoint %s: %w", b.cfg.Name, id, err)
	}
	took := time.Since(start)
	if !leaveRunning {
		// The client stays, held, for a restore: the VM ends without it.
		// The box keeps its client meanwhile: whoever looks the box up
		// before it is taken finds it ending, never without a client.
		bx.killVM()
		<-bx.Done()
		b.boxes.Take(id)
	}
	if err := b.held.Record(id, dir, img, bx.Client, !leaveRunning); err != nil {
		return fmt.Errorf("%s: checkpoint %s: %w", b.cfg.Name, id, err)
	}
	b.log.Info("sandbox checkpointed", "id", id, "vm", bx.name, "left_running", leaveRunning, "took", took.String(), "bytes", hostdirs.TreeBytes(dir))
	return nil
}

// Restore boots the VM of spec.ID from the checkpoint in dir unless it
// runs. A checkpoint taken with anything else than this server has, or
// one QEMU cannot load, is sandbox.ErrCheckpointIncompatible.
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	if err := b.Checkpoints(ctx).Err(); err != nil {
		return fmt.Errorf("%s: %w", b.cfg.Name, err)
	}
	err := b.boxes.Ensure(ctx, spec, b.cfg.Dirs, func(ctx context.Context, spec sandbox.Spec) (*box, error) {
		rec, err := boxes.ReadCheckpointRecord(dir)
		if err != nil {
			b.held.Drop(spec.ID)
			return nil, err
		}
		g, err := LoadGuest(b.cfg.Guest, b.cfg.Kernel)
		if err != nil {
			return nil, err
		}
		sh := shares(spec, false)
		if b.cfg.TrustDir != "" {
			sh = append(sh, share{Mount: sandbox.Mount{Source: b.cfg.TrustDir, Target: boxes.TrustPath, ReadOnly: true}, Export: b.cfg.TrustDir})
		}
		now, err := b.image(g, sh, b.limits(spec.Limits))
		if err != nil {
			return nil, err
		}
		if err := rec.Image.Mismatch(now); err != nil {
			b.held.Drop(spec.ID)
			return nil, err
		}
		bx, err := b.boot(ctx, spec, bootRestore, nil, dir)
		if err != nil {
			b.held.Drop(spec.ID)
			if !errors.Is(err, sandbox.ErrCheckpointIncompatible) {
				err = fmt.Errorf("%w: %w", sandbox.ErrCheckpointIncompatible, err)
			}
			return nil, err
		}
		return bx, nil
	})
	if err != nil {
		return fmt.Errorf("%s: restore: %w", b.cfg.Name, err)
	}
	return nil
}

// release makes the agent client of the restored VM bx over conn: the
// client its checkpoint kept, resumed over it, or a new one. The agent,
// held since the checkpoint, is released with the host's clock and a
// seed of its own.
func (b *Backend) release(ctx context.Context, bx *box, conn net.Conn) error {
	seed := make([]byte, guestinit.SeedBytes)
	_, _ = rand.Read(seed)
	r := protocol.Release{ClockUnixNano: time.Now().UnixNano(), Seed: seed}
	if c := b.held.Take(bx.id); c != nil {
		bx.Client = c
		return c.ResumeWith(ctx, conn, r)
	}
	bx.Client = boxes.NewAgent(conn)
	return bx.Client.ReleaseWith(ctx, r)
}
