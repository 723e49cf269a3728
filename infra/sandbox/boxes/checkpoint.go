package boxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"threadbox/domain/sandbox"
	"threadbox/infra/sandbox/agent"
)

// FilesOnly answers for a backend whose sandboxes keep their files only
// across a stop: a backend embeds it for its checkpoint methods.
type FilesOnly struct {
	name, reason string
}

// KeepsFilesOnly returns the checkpoint answers of the backend name, whose
// sandboxes keep files only for reason.
func KeepsFilesOnly(name, reason string) FilesOnly {
	return FilesOnly{name: name, reason: reason}
}

// Checkpoints answers that sandboxes keep files only across a stop.
func (f FilesOnly) Checkpoints(context.Context) sandbox.CheckpointSupport {
	return sandbox.FilesOnly(f.reason)
}

// Checkpoint is unsupported: a sandbox keeps files only.
func (f FilesOnly) Checkpoint(ctx context.Context, id, dir string) error {
	return fmt.Errorf("%s: %w", f.name, f.Checkpoints(ctx).Err())
}

// CheckpointRunning is unsupported: a sandbox keeps files only.
func (f FilesOnly) CheckpointRunning(ctx context.Context, id, dir string) error {
	return fmt.Errorf("%s: %w", f.name, f.Checkpoints(ctx).Err())
}

// Restore is unsupported: a sandbox keeps files only.
func (f FilesOnly) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return fmt.Errorf("%s: %w", f.name, f.Checkpoints(ctx).Err())
}

// Saves are the checkpoint calls of sandbox.Backend for a backend that
// saves its running boxes of type B: a backend embeds them, and answers
// Checkpoints and Restore itself.
type Saves[B Box] struct {
	set     *Set[B]
	support func(context.Context) sandbox.CheckpointSupport
	save    func(ctx context.Context, id string, bx B, dir string, leaveRunning bool) error
}

// NewSaves returns the checkpoint calls over set's boxes. support is the
// backend's Checkpoints; save saves the running box bx of id into dir,
// ending it or leaving it running, and is called with id's lock held.
func NewSaves[B Box](set *Set[B], support func(context.Context) sandbox.CheckpointSupport, save func(ctx context.Context, id string, bx B, dir string, leaveRunning bool) error) Saves[B] {
	return Saves[B]{set: set, support: support, save: save}
}

// Checkpoint saves the running sandbox id into dir and ends it. It wraps
// sandbox.ErrUnsupported when the backend's Checkpoints says no, and
// sandbox.ErrUnavailable when id does not run.
func (s Saves[B]) Checkpoint(ctx context.Context, id, dir string) error {
	return s.run(ctx, id, dir, false)
}

// CheckpointRunning saves the running sandbox id into dir and lets it go
// on. It wraps sandbox.ErrUnsupported when the backend's Checkpoints says
// no, and sandbox.ErrUnavailable when id does not run.
func (s Saves[B]) CheckpointRunning(ctx context.Context, id, dir string) error {
	return s.run(ctx, id, dir, true)
}

// run hands id's running box to the backend's save under id's lock, so
// that no boot or stop of id runs meanwhile.
func (s Saves[B]) run(ctx context.Context, id, dir string, leaveRunning bool) error {
	if err := s.support(ctx).Err(); err != nil {
		return fmt.Errorf("%s: %w", s.set.name, err)
	}
	defer s.set.Lock(id)()
	bx, ok := s.set.Live(id)
	if !ok {
		return fmt.Errorf("%s: checkpoint %s: %w: sandbox is not running", s.set.name, id, sandbox.ErrUnavailable)
	}
	return s.save(ctx, id, bx, dir, leaveRunning)
}

// CheckpointRecordFile is the file beside a backend's checkpoint that
// says what it was taken with.
const CheckpointRecordFile = "threadbox-checkpoint.json"

// CheckpointRecord is the content of CheckpointRecordFile.
type CheckpointRecord struct {
	Image   sandbox.CheckpointImage `json:"image"`
	TakenAt time.Time               `json:"taken_at"`
}

// WriteCheckpointRecord writes into dir that its checkpoint was taken
// with img, now.
func WriteCheckpointRecord(dir string, img sandbox.CheckpointImage) error {
	data, err := json.Marshal(CheckpointRecord{Image: img, TakenAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CheckpointRecordFile), data, 0o600)
}

// ReadCheckpointRecord reads what the checkpoint in dir was taken with; a
// missing or damaged record wraps sandbox.ErrCheckpointIncompatible.
func ReadCheckpointRecord(dir string) (CheckpointRecord, error) {
	data, err := os.ReadFile(filepath.Join(dir, CheckpointRecordFile))
	if err != nil {
		return CheckpointRecord{}, fmt.Errorf("%w: %w", sandbox.ErrCheckpointIncompatible, err)
	}
	var r CheckpointRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return CheckpointRecord{}, fmt.Errorf("%w: %s: %w", sandbox.ErrCheckpointIncompatible, CheckpointRecordFile, err)
	}
	return r, nil
}

// AgentDigest is the sha256 of an agent binary, which a checkpoint
// records: a restore needs the same agent. It is read again when the
// binary's size or modification time changed.
type AgentDigest struct {
	mu     sync.Mutex
	key    string
	digest string
}

// Of returns the digest of the agent binary at path.
func (d *AgentDigest) Of(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	key := fmt.Sprintf("%s %d/%d", path, fi.Size(), fi.ModTime().UnixNano())
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.key == key {
		return d.digest, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	d.key, d.digest = key, "sha256:"+hex.EncodeToString(h.Sum(nil))
	return d.digest, nil
}

// HeldClients keeps the agent clients of checkpointed sandboxes, by
// sandbox id, for their restore by this process: the sessions they
// started (interpreters, terminals) stay theirs across it.
type HeldClients struct {
	mu   sync.Mutex
	held map[string]*agent.Client
}

// Put keeps c for id, ending a client kept before. A client already
// closed (its sandbox was killed with it while the checkpoint was
// written) is not kept: the restore takes the agent over with a new
// client, where a closed one would fail it.
func (h *HeldClients) Put(id string, c *agent.Client) {
	if c.Err() != nil {
		h.Drop(id)
		return
	}
	h.mu.Lock()
	if h.held == nil {
		h.held = map[string]*agent.Client{}
	}
	old := h.held[id]
	h.held[id] = c
	h.mu.Unlock()
	if old != nil && old != c {
		old.Close()
	}
}

// Record ends a checkpoint of id into dir: it writes what the checkpoint
// was taken with (WriteCheckpointRecord) and, for a sandbox the
// checkpoint ended, keeps its client c for the restore (Put), or closes
// it when the record cannot be written (nothing will restore it). A
// sandbox left running keeps its client.
func (h *HeldClients) Record(id, dir string, img sandbox.CheckpointImage, c *agent.Client, ended bool) error {
	if err := WriteCheckpointRecord(dir, img); err != nil {
		if ended {
			c.Close()
		}
		return err
	}
	if ended {
		h.Put(id, c)
	}
	return nil
}

// Take returns and forgets the client kept for id, or nil.
func (h *HeldClients) Take(id string) *agent.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.held[id]
	delete(h.held, id)
	return c
}

// Drop ends the client kept for id, if any: the sessions it started end
// (their sandbox is not coming back).
func (h *HeldClients) Drop(id string) {
	if c := h.Take(id); c != nil {
		c.Close()
	}
}

// DropAll ends every client kept.
func (h *HeldClients) DropAll() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, c := range held {
		c.Close()
	}
}
