package boxes

import (
	"cmp"
	"log/slog"
	"os"
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
	// discards. The caller names the backend in it (the server's wiring
	// adds a "backend" attribute): the backend's own lines do not repeat
	// it, which would put the key twice in a JSON line.
	Logger *slog.Logger
	// TrustDir is a host folder mounted read-only at TrustPath in every
	// sandbox (the install's egress CA and a bundle with it), with
	// TrustEnv set; "" mounts nothing. Docker (runc, runsc), gvisor and
	// local bind it; microvm shares it over 9p, read-only; kubernetes
	// mounts a ConfigMap of its files.
	TrustDir string
}

// DefaultInstance is the Instance of a backend whose Settings name none.
const DefaultInstance = "default"

// Defaults fills the zero settings: DefaultInstance, the backend's boot
// timeout, sandbox.DefaultLimits and a logger that discards.
func (s *Settings) Defaults(bootTimeout time.Duration) {
	s.Instance = cmp.Or(s.Instance, DefaultInstance)
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

// FindCached returns the folder of a build artefact the backends boot
// from: the one the environment variable env names, else sub/current in
// the cache the sandbox image's build uses ($THREADBOX_CACHE_DIR, else
// $DATA_DIR/cache, else /var/cache/threadbox); the first that holds the
// file marker (a path inside it), or "" when neither does.
func FindCached(getenv func(string) string, env, sub, marker string) string {
	cache := "/var/cache/threadbox"
	if v := getenv("THREADBOX_CACHE_DIR"); v != "" {
		cache = v
	} else if v := getenv("DATA_DIR"); v != "" {
		cache = filepath.Join(v, "cache")
	}
	for _, c := range []string{getenv(env), filepath.Join(cache, sub, "current")} {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(c, marker)); err == nil && !fi.IsDir() {
			return c
		}
	}
	return ""
}
