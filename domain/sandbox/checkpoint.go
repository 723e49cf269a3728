package sandbox

import (
	"errors"
	"fmt"
	"strings"
)

// ErrCheckpointIncompatible reports a checkpoint that this backend cannot
// restore: taken by another runtime build, root filesystem or agent, with
// other folders, or damaged. The caller drops it and boots the sandbox
// fresh over its files.
var ErrCheckpointIncompatible = errors.New("checkpoint cannot be restored")

// CheckpointSupport is a backend's answer about checkpoints on this host:
// whether it can save a running sandbox (its processes, their memory, open
// files and terminals, its /tmp) and boot it again from what it saved, and
// if not, why. A backend that cannot keeps files only: a stopped sandbox
// boots fresh over its folders. Unsupported is an answer, never a type
// check that a wrapper could hide.
type CheckpointSupport struct {
	Supported bool
	// Mechanism names how checkpoints are taken (the runtime and its
	// build), when they are.
	Mechanism string
	// Reason says why checkpoints are not taken, when they are not.
	Reason string
}

// FilesOnly is the answer of a backend that keeps only a sandbox's files
// across a stop, for reason.
func FilesOnly(reason string) CheckpointSupport {
	return CheckpointSupport{Reason: reason}
}

// Err returns nil when checkpoints are supported, else an error wrapping
// ErrUnsupported with the reason, for a Checkpoint or Restore call that
// cannot be served.
func (c CheckpointSupport) Err() error {
	if c.Supported {
		return nil
	}
	if c.Reason == "" {
		return fmt.Errorf("checkpoint: %w", ErrUnsupported)
	}
	return fmt.Errorf("checkpoint: %w: %s", ErrUnsupported, c.Reason)
}

// CheckpointImage says what a checkpoint was taken with. A checkpoint
// restores only into the same runtime build, root filesystem and agent,
// with the same folders at the same places (their host sources may
// differ): Mismatch names the first difference.
type CheckpointImage struct {
	Backend string // the backend's name
	Runtime string // the runtime's build ("runsc version …")
	RootFS  string // the root filesystem's identity (its resolved folder, or an image id)
	Agent   string // the agent binary's digest
	Targets []Mount
}

// Mismatch returns nil when a checkpoint taken as i restores as now, else
// an error wrapping ErrCheckpointIncompatible naming what differs.
func (i CheckpointImage) Mismatch(now CheckpointImage) error {
	differ := func(what, was, is string) error {
		return fmt.Errorf("%w: taken with %s %q, this server has %q", ErrCheckpointIncompatible, what, was, is)
	}
	switch {
	case i.Backend != now.Backend:
		return differ("backend", i.Backend, now.Backend)
	case i.Runtime != now.Runtime:
		return differ("runtime", i.Runtime, now.Runtime)
	case i.RootFS != now.RootFS:
		return differ("root filesystem", i.RootFS, now.RootFS)
	case i.Agent != now.Agent:
		return differ("agent", i.Agent, now.Agent)
	case !SameTargets(i.Targets, now.Targets):
		return differ("folders", targets(i.Targets), targets(now.Targets))
	}
	return nil
}

// TargetsOf returns the mounts ms without their host sources: what a
// checkpoint records of a sandbox's folders, which a restore must give the
// same targets (the sources may differ).
func TargetsOf(ms []Mount) []Mount {
	out := make([]Mount, len(ms))
	for i, m := range ms {
		out[i] = Mount{Target: m.Target, ReadOnly: m.ReadOnly}
	}
	return out
}

// targets lists mounts' targets, read-only ones marked.
func targets(ms []Mount) string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		t := m.Target
		if m.ReadOnly {
			t += ":ro"
		}
		out = append(out, t)
	}
	return strings.Join(out, ",")
}
