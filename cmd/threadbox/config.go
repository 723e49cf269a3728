package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"threadbox/app/bridge"
	"threadbox/domain/org"
	"threadbox/infra/blob"
	"threadbox/infra/sandbox/local"
	"threadbox/infra/sandbox/microvm"
	"threadbox/infra/webfetch"
)

// Config is every setting, loaded once from the environment.
type Config struct {
	ListenAddr string
	DataDir    string
	// BlobURL is where artifact blobs are kept: empty for DATA_DIR/artifacts,
	// or s3://bucket[/prefix]?endpoint=...&region=... for an S3-compatible
	// store (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
	BlobURL string
	// BlobCreateBucket makes BLOB_URL's bucket when it does not exist
	// (BLOB_CREATE_BUCKET=true; development and tests).
	BlobCreateBucket bool
	// BlobPresign redirects artifact downloads to presigned URLs of the
	// S3-compatible store (BLOB_PRESIGN=true; the store's endpoint must be
	// reachable by clients).
	BlobPresign bool
	DatabaseURL string
	PublicURL   string
	JWTIssuer   string
	JWTAudience string
	JWTKeyFile  string
	SessionTTL  time.Duration
	AccessTTL   time.Duration
	// Login throttling (app/auth): attempts per window per email and per
	// client address, and the window; how many password checks (bcrypt)
	// run at once (LOGIN_CONCURRENCY, default the CPU count).
	LoginEmailLimit int
	LoginAddrLimit  int
	LoginWindow     time.Duration
	LoginChecks     int
	ShutdownGrace   time.Duration
	LogLevel        string
	SandboxBackend  []string
	SandboxRuntime  string
	SandboxImage    string
	SandboxIdle     time.Duration
	SandboxQuota    string
	RootFS          string
	MicroVM         MicroVMConfig
	SandboxMemory   int64
	SandboxCPUs     float64
	SandboxPids     int64
	SandboxDisk     int64
	Instance        string
	ContainerMax    time.Duration
	CheckpointMax   time.Duration // CHECKPOINT_MAX_AGE: how long a sandbox's checkpoint waits for its next use
	SweepInterval   time.Duration
	WarmPool        int
	WarmMemory      int64
	LeaseTTL        time.Duration
	BatchWorkers    int // BATCH_WORKERS: Message Batch requests this process runs at once
	BatchPerOrg     int // BATCH_CONCURRENCY_PER_ORG: those of one org running at once on every server
	AgentBin        string
	ModelProvider   string
	ModelBaseURL    string
	ModelAPIKey     string
	ModelName       string
	MaxToolIters    int
	TurnTimeout     time.Duration
	MetricsToken    string
	ToolMaxOutput   int64
	// AllowToolTypes are typed tools passed to the model as sent
	// (ALLOW_TOOL_TYPES, comma-separated).
	AllowToolTypes []string
	// URLFetchAllow are internal addresses URL images and documents may be
	// fetched from all the same (URL_FETCH_ALLOW); URLFetchMaxBytes caps one
	// (URL_FETCH_MAX_BYTES).
	URLFetchAllow []netip.Prefix
	// TrustedProxies are reverse proxies whose X-Forwarded-For is believed
	// (TRUSTED_PROXIES).
	TrustedProxies   []netip.Prefix
	URLFetchMaxBytes int64
	MaxUploadBytes   int64
	// MaxArtifactBytes caps the output files kept as artifacts or retained
	// when their container expires, and the holes the retained outputs of
	// one container write out together.
	MaxArtifactBytes int64
	// QuotaBounds are the operator's default and ceiling of every org
	// quota (QUOTA_<NAME>, QUOTA_<NAME>_MAX; quotabounds.go).
	QuotaBounds org.Bounds
	// OrgEmailDomains keeps email domains for the orgs that own them
	// (ORG_EMAIL_DOMAINS, a JSON object of domain to org name).
	OrgEmailDomains org.EmailDomains
	// SandboxServices are the internal services exposed inside sandboxes
	// (SANDBOX_ALLOW_SERVICES, name=host:port,...).
	SandboxServices []bridge.Service
	// SandboxAPIPort is the product API's loopback port inside sandboxes.
	SandboxAPIPort int
	// Egress is the operator's side of controlled egress (EGRESS_*;
	// docs/egress.md).
	Egress EgressConfig
	// Procs is THREADBOX_PROCS: how many threads run the server's Go code
	// at once; 0 means half the CPUs (see serveProcs).
	Procs int
	// PythonCellTimeout is the wall-clock limit of one Python cell of
	// code_execution_20260120 and later (PYTHON_CELL_TIMEOUT).
	PythonCellTimeout time.Duration
	// PythonToolResultTimeout is how long a Python cell paused on client
	// tool calls waits for their results (PYTHON_TOOL_RESULT_TIMEOUT).
	PythonToolResultTimeout time.Duration
	// Kubernetes configures the kubernetes backend (K8S_*, KUBECONFIG).
	Kubernetes kubeSettings
}

// DefaultSandboxBackend is SANDBOX_BACKEND when the variable is unset.
const DefaultSandboxBackend = "docker"

// configError is a bad setting; main prints it on one line and exits 2.
type configError struct{ name, msg string }

func (e *configError) Error() string { return fmt.Sprintf("config: %s: %s", e.name, e.msg) }

// loadConfig reads the environment through getenv.
func loadConfig(getenv func(string) string) (Config, error) {
	env := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	var err error
	dur := func(name, def string) time.Duration {
		v := env(name, def)
		d, perr := time.ParseDuration(v)
		if (perr != nil || d <= 0) && err == nil {
			err = &configError{name, fmt.Sprintf("%q is not a positive duration such as 5m", v)}
		}
		return d
	}
	// whole reads a whole number of at least least; want says what it must
	// be.
	whole := func(name string, def, least int64, want string) int64 {
		v := env(name, strconv.FormatInt(def, 10))
		n, perr := strconv.ParseInt(v, 10, 64)
		if (perr != nil || n < least) && err == nil {
			err = &configError{name, fmt.Sprintf("%q is not %s", v, want)}
		}
		return n
	}
	num := func(name string, def int64) int64 { return whole(name, def, 1, "a positive whole number") }
	// count is num where 0 is allowed (0 turns the feature off).
	count := func(name string, def int64) int64 { return whole(name, def, 0, "a whole number (0 turns it off)") }
	c := Config{
		ListenAddr:       env("LISTEN_ADDR", "127.0.0.1:8080"),
		DataDir:          env("DATA_DIR", "./data"),
		BlobURL:          env("BLOB_URL", ""),
		BlobCreateBucket: env("BLOB_CREATE_BUCKET", "") == "true",
		BlobPresign:      env("BLOB_PRESIGN", "") == "true",
		DatabaseURL:      env("DATABASE_URL", ""),
		JWTIssuer:        env("JWT_ISSUER", "threadbox"),
		JWTAudience:      env("JWT_AUDIENCE", "threadbox-api"),
		SessionTTL:       dur("SESSION_TTL", "12h"),
		AccessTTL:        dur("ACCESS_TTL", "10m"),
		LoginEmailLimit:  int(num("LOGIN_EMAIL_LIMIT", 10)),
		LoginAddrLimit:   int(num("LOGIN_ADDR_LIMIT", 50)),
		LoginWindow:      dur("LOGIN_WINDOW", "15m"),
		LoginChecks:      int(num("LOGIN_CONCURRENCY", int64(runtime.NumCPU()))),
		ShutdownGrace:    dur("SHUTDOWN_GRACE", "20s"),
		LogLevel:         env("LOG_LEVEL", "info"),
		SandboxRuntime:   env("SANDBOX_RUNTIME", "runc"),
		SandboxImage:     env("SANDBOX_IMAGE", "threadbox-sandbox:latest"),
		SandboxIdle:      dur("SANDBOX_IDLE", "5m"),
		SandboxQuota:     env("SANDBOX_DISK_QUOTA", "auto"),
		RootFS:           env("THREADBOX_ROOTFS", ""),
		MicroVM: MicroVMConfig{
			Accel:     env("MICROVM_ACCEL", ""),
			Template:  env("MICROVM_TEMPLATE", "on"),
			Kernel:    env("MICROVM_KERNEL", ""),
			QEMU:      env("MICROVM_QEMU", ""),
			Guest:     findGuest(getenv),
			RootImage: env("MICROVM_ROOT_IMAGE", ""),
		},
		SandboxMemory:    num("SANDBOX_MEMORY_BYTES", 5<<30),
		SandboxPids:      num("SANDBOX_PIDS", 512),
		SandboxDisk:      num("SANDBOX_DISK_BYTES", 5<<30),
		Instance:         env("THREADBOX_INSTANCE", "default"),
		ContainerMax:     dur("CONTAINER_MAX_AGE", "720h"),
		CheckpointMax:    dur("CHECKPOINT_MAX_AGE", "720h"),
		SweepInterval:    dur("SWEEP_INTERVAL", "30s"),
		WarmPool:         int(count("SANDBOX_WARM_POOL", 2)),
		BatchWorkers:     int(num("BATCH_WORKERS", 4)),
		BatchPerOrg:      int(num("BATCH_CONCURRENCY_PER_ORG", 4)),
		WarmMemory:       num("SANDBOX_WARM_POOL_MEMORY", 512<<20),
		LeaseTTL:         dur("LEASE_TTL", "20s"),
		AgentBin:         env("THREADBOX_AGENT_BIN", ""),
		ModelProvider:    env("MODEL_PROVIDER", ""),
		ModelBaseURL:     env("MODEL_BASE_URL", ""),
		ModelAPIKey:      env("MODEL_API_KEY", ""),
		ModelName:        env("MODEL_NAME", ""),
		MaxToolIters:     int(num("MAX_TOOL_ITERATIONS", 25)),
		TurnTimeout:      dur("TURN_TIMEOUT", "10m"),
		MetricsToken:     env("METRICS_TOKEN", ""),
		ToolMaxOutput:    num("TOOL_MAX_OUTPUT_BYTES", 1<<20),
		URLFetchMaxBytes: num("URL_FETCH_MAX_BYTES", webfetch.DefaultMaxBytes),
		MaxUploadBytes:   num("MAX_UPLOAD_BYTES", 5<<30),
		MaxArtifactBytes: num("ARTIFACT_MAX_BYTES", 1<<30),
	}
	c.PythonCellTimeout = dur("PYTHON_CELL_TIMEOUT", "90s")
	c.PythonToolResultTimeout = dur("PYTHON_TOOL_RESULT_TIMEOUT", "270s")
	c.Kubernetes = loadKubeSettings(env)
	if err != nil {
		return Config{}, err
	}
	if c.TrustedProxies, err = webfetch.ParseAllow(getenv("TRUSTED_PROXIES")); err != nil {
		return Config{}, &configError{"TRUSTED_PROXIES", err.Error()}
	}
	if c.URLFetchAllow, err = webfetch.ParseAllow(getenv("URL_FETCH_ALLOW")); err != nil {
		return Config{}, &configError{"URL_FETCH_ALLOW", err.Error()}
	}
	if c.OrgEmailDomains, err = parseEmailDomains(getenv("ORG_EMAIL_DOMAINS")); err != nil {
		return Config{}, &configError{"ORG_EMAIL_DOMAINS", err.Error()}
	}
	if c.QuotaBounds, err = loadQuotaBounds(getenv); err != nil {
		return Config{}, err
	}
	for t := range strings.SplitSeq(getenv("ALLOW_TOOL_TYPES"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.AllowToolTypes = append(c.AllowToolTypes, t)
		}
	}
	if c.Procs, err = parseProcs(getenv("THREADBOX_PROCS")); err != nil {
		return Config{}, err
	}
	if c.BlobURL != "" {
		if _, e := blob.ParseS3URL(c.BlobURL); e != nil {
			return Config{}, &configError{"BLOB_URL", e.Error()}
		}
	} else if c.BlobPresign {
		return Config{}, &configError{"BLOB_PRESIGN", "needs BLOB_URL: only an S3-compatible store can presign downloads"}
	}
	if _, _, e := net.SplitHostPort(c.ListenAddr); e != nil {
		return Config{}, &configError{"LISTEN_ADDR", fmt.Sprintf("%q is not host:port", c.ListenAddr)}
	}
	if c.DatabaseURL != "" {
		u, e := url.Parse(c.DatabaseURL)
		if e != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return Config{}, &configError{"DATABASE_URL", "must be a postgres:// URL, or empty for the embedded SQLite"}
		}
	}
	abs, e := filepath.Abs(c.DataDir)
	if e != nil {
		return Config{}, &configError{"DATA_DIR", e.Error()}
	}
	c.DataDir = abs
	if c.RootFS == "" {
		// The offline image build keeps the root filesystem in a cache
		// folder: THREADBOX_CACHE_DIR, else DATA_DIR/cache, else /var/cache/threadbox.
		c.RootFS = local.FindRootFS(getenv)
		if c.RootFS == "" {
			c.RootFS = local.FindRootFS(func(k string) string {
				if k == "DATA_DIR" {
					return ""
				}
				return getenv(k)
			})
		}
	}
	c.JWTKeyFile = env("JWT_KEY_FILE", filepath.Join(c.DataDir, "jwt-ed25519.pem"))
	c.PublicURL = env("PUBLIC_URL", "http://"+c.ListenAddr)
	if u, e := url.Parse(c.PublicURL); e != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, &configError{"PUBLIC_URL", fmt.Sprintf("%q is not an http(s) URL", c.PublicURL)}
	}
	// The default is docker alone: the local backend is a development jail,
	// never a silent fallback; it serves only where SANDBOX_BACKEND lists it.
	for _, b := range strings.Split(env("SANDBOX_BACKEND", DefaultSandboxBackend), ",") {
		b = strings.TrimSpace(b)
		switch b {
		case "docker", "gvisor", "local", "kubernetes", "microvm", "firecracker", "e2b", "superserve", "blaxel":
			c.SandboxBackend = append(c.SandboxBackend, b)
		case "":
		default:
			return Config{}, &configError{"SANDBOX_BACKEND", fmt.Sprintf("unknown backend %q (docker, gvisor, local, kubernetes, microvm, firecracker, e2b, superserve, blaxel)", b)}
		}
	}
	svcs, serr := bridge.ParseServices(env("SANDBOX_ALLOW_SERVICES", ""))
	if serr != nil {
		return Config{}, &configError{"SANDBOX_ALLOW_SERVICES", serr.Error()}
	}
	c.SandboxServices = svcs
	port, perr := strconv.Atoi(env("SANDBOX_API_PORT", strconv.Itoa(bridge.DefaultAPIPort)))
	if perr != nil || port < 1 || port+len(svcs) > 65535 {
		return Config{}, &configError{"SANDBOX_API_PORT", "must be a port number, with room after it for each allowed service"}
	}
	c.SandboxAPIPort = port
	if c.Egress, err = loadEgressConfig(getenv); err != nil {
		return Config{}, err
	}
	cpus, perr := strconv.ParseFloat(env("SANDBOX_CPUS", "1"), 64)
	if perr != nil || cpus <= 0 || cpus > 64 {
		return Config{}, &configError{"SANDBOX_CPUS", "must be a number of CPUs such as 1 or 0.5"}
	}
	c.SandboxCPUs = cpus
	switch c.SandboxQuota {
	case "auto", "loop", "none":
	default:
		return Config{}, &configError{"SANDBOX_DISK_QUOTA", fmt.Sprintf("%q is not auto, loop or none", c.SandboxQuota)}
	}
	switch c.MicroVM.Accel {
	case "", "kvm", "tcg":
	default:
		return Config{}, &configError{"MICROVM_ACCEL", fmt.Sprintf("%q is not kvm or tcg (empty: KVM where it can run the guest kernel)", c.MicroVM.Accel)}
	}
	switch c.MicroVM.Template {
	case "on", "off":
	default:
		return Config{}, &configError{"MICROVM_TEMPLATE", fmt.Sprintf("%q is not on or off", c.MicroVM.Template)}
	}
	switch c.SandboxRuntime {
	case "runc", "runsc":
	default:
		return Config{}, &configError{"SANDBOX_RUNTIME", fmt.Sprintf("%q is not runc or runsc", c.SandboxRuntime)}
	}
	switch c.ModelProvider {
	case "":
		c.ModelProvider = "runner"
		if c.ModelBaseURL != "" {
			c.ModelProvider = "anthropic"
		}
	case "anthropic", "openai", "runner":
	default:
		return Config{}, &configError{"MODEL_PROVIDER", fmt.Sprintf("%q is not anthropic, openai or runner", c.ModelProvider)}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return Config{}, &configError{"LOG_LEVEL", fmt.Sprintf("%q is not debug, info, warn or error", c.LogLevel)}
	}
	return c, nil
}

// parseProcs reads THREADBOX_PROCS: empty or "auto" is 0.
func parseProcs(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "auto" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, &configError{"THREADBOX_PROCS", fmt.Sprintf("%q is not a positive whole number or auto", v)}
	}
	return n, nil
}

// serveProcs returns the scheduler size (GOMAXPROCS) for serve, given the
// runtime's own choice: THREADBOX_PROCS when set, else half of the
// runtime's, at least two where there are two. The server mostly waits on
// sockets, the database and sandboxes; the other cores are left to the
// sandboxes it runs. Two rather than one on a 2-CPU machine: one thread
// queues every request in flight behind the others' work (at concurrency 16
// a quarter more added latency here), and since the upstream client writes
// and reads in the handler's goroutine a second thread no longer costs a
// request its cross-thread wake-ups (docs/benchmarks.md). A GOMAXPROCS
// variable wins over both: serveProcs then returns current.
func serveProcs(getenv func(string) string, current int) int {
	if strings.TrimSpace(getenv("GOMAXPROCS")) != "" {
		return current
	}
	n, err := parseProcs(getenv("THREADBOX_PROCS"))
	if err != nil {
		return current // run reports the bad value
	}
	if n == 0 {
		n = min(current, max(2, current/2))
	}
	return max(1, n)
}

// parseEmailDomains reads ORG_EMAIL_DOMAINS: a JSON object whose keys are
// email domains and whose values name the org that owns each, such as
// {"acme.example": "acme", "globex.example": "globex"}; empty owns none.
func parseEmailDomains(v string) (org.EmailDomains, error) {
	if strings.TrimSpace(v) == "" {
		return org.EmailDomains{}, nil
	}
	var owners map[string]string
	if err := json.Unmarshal([]byte(v), &owners); err != nil {
		return org.EmailDomains{}, fmt.Errorf(`want a JSON object of email domain to org name, such as {"acme.example": "acme"}: %w`, err)
	}
	return org.NewEmailDomains(owners)
}

// findGuest finds the microVM guest artefacts as the root filesystem is
// found: MICROVM_GUEST, else the cache (THREADBOX_CACHE_DIR, else
// DATA_DIR/cache, else /var/cache/threadbox, also tried when DATA_DIR's
// has none).
func findGuest(getenv func(string) string) string {
	if g := microvm.FindGuest(getenv); g != "" {
		return g
	}
	return microvm.FindGuest(func(k string) string {
		if k == "DATA_DIR" {
			return ""
		}
		return getenv(k)
	})
}
