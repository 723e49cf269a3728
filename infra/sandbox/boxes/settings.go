package boxes

import (
	"log/slog"
	"path/filepath"
	"time"

	"threadbox/domain/sandbox"
)

// Settings are the configuration every backend shares; each backend's
// Config embeds them.
type Settings struct {
	// Instance separates several threadbox servers (or test runs) on one
	// host, daemon or namespace: names, state and Reconcile are scoped to
	// it. Default "default".
	Instance string
	// Limits are the defaults for zero fields of a Spec's Limits; zero
	// fields here take sandbox.DefaultLimits.
	Limits sandbox.Limits
	// BootTimeout bounds a boot (or a restore) up to the agent's first
	// answer; default the backend's.
	BootTimeout time.Duration
	// Logger receives lifecycle events and the sandboxes' stderr; default
	// discards.
	Logger *slog.Logger
	// TrustDir is a host folder mounted read-only at TrustPath in every
	// sandbox (the install's egress CA and a bundle with it), with
	// TrustEnv set; "" mounts nothing. Docker (runc, runsc), gvisor and
	// local bind it; kubernetes mounts a ConfigMap of its files.
	TrustDir string
}

// DefaultInstance is the Instance of a backend whose Settings name none.
const DefaultInstance = "default"

// Defaults fills the zero settings: DefaultInstance, the backend's boot
// timeout, sandbox.DefaultLimits and a logger that discards.
func (s *Settings) Defaults(bootTimeout time.Duration) {
	if s.Instance == "" {
		s.Instance = DefaultInstance
	}
	if s.BootTimeout <= 0 {
		s.BootTimeout = bootTimeout
	}
	s.Limits = s.Limits.Or(sandbox.DefaultLimits())
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
}

// ResolveRootFS returns a root filesystem folder with its symbolic links
// resolved (the image cache's current link names one recipe's folder), so
// a backend keeps the folder it started with; path as given when it is
// empty or cannot be resolved.
func ResolveRootFS(path string) string {
	if path == "" {
		return ""
	}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return path
}
