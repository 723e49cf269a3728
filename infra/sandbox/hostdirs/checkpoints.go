package hostdirs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// A container's checkpoint lives in a folder of its own beside its
// folders, DATA_DIR/checkpoints/<safe id> (mode 0700: it holds the
// sandbox's memory), outside its disk quota; Remove deletes it with the
// container. The backend that checkpoints the sandbox writes the folder;
// sealFile, written last, says a checkpoint in it is whole and which
// backend took it.

// sealFile names the record of a whole checkpoint.
const sealFile = "threadbox-sealed.json"

// seal is the content of sealFile.
type seal struct {
	Backend string    `json:"backend"`
	TakenAt time.Time `json:"taken_at"`
}

// CheckpointDir returns the folder of container id's checkpoint.
func (l *Layout) CheckpointDir(id string) string {
	return filepath.Join(l.checkpoints, SafeID(id))
}

// EmptyCheckpoint makes container id's checkpoint folder exist and be
// empty, and returns it.
func (l *Layout) EmptyCheckpoint(ctx context.Context, id string) (string, error) {
	defer l.lock(id)()
	dir := l.CheckpointDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("hostdirs: checkpoint: %w", err)
	}
	if err := os.MkdirAll(l.checkpoints, 0o700); err != nil {
		return "", fmt.Errorf("hostdirs: checkpoint: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("hostdirs: checkpoint: %w", err)
	}
	return dir, nil
}

// SealCheckpoint records that container id's checkpoint folder holds a
// whole checkpoint, taken by backend.
func (l *Layout) SealCheckpoint(ctx context.Context, id, backend string) error {
	defer l.lock(id)()
	data, err := json.Marshal(seal{Backend: backend, TakenAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("hostdirs: seal checkpoint: %w", err)
	}
	tmp := filepath.Join(l.CheckpointDir(id), sealFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("hostdirs: seal checkpoint: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(l.CheckpointDir(id), sealFile)); err != nil {
		return fmt.Errorf("hostdirs: seal checkpoint: %w", err)
	}
	return nil
}

// Checkpoint returns the folder of container id's sealed checkpoint and
// the backend that took it; ok is false when there is none.
func (l *Layout) Checkpoint(ctx context.Context, id string) (dir, backend string, ok bool) {
	defer l.lock(id)()
	dir = l.CheckpointDir(id)
	data, err := os.ReadFile(filepath.Join(dir, sealFile))
	if err != nil {
		return "", "", false
	}
	var s seal
	if json.Unmarshal(data, &s) != nil || s.Backend == "" {
		return "", "", false
	}
	return dir, s.Backend, true
}

// DropCheckpoint removes container id's checkpoint, whole or not.
func (l *Layout) DropCheckpoint(ctx context.Context, id string) error {
	defer l.lock(id)()
	if err := os.RemoveAll(l.CheckpointDir(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("hostdirs: drop checkpoint: %w", err)
	}
	return nil
}
