// Command threadbox is the threadbox server and its operator commands.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"threadbox/app/auth"
	"threadbox/app/backends"
	"threadbox/app/lease"
	"threadbox/infra/jwt"
	"threadbox/infra/store"
	"threadbox/web"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The scheduler's size is the process's, so main sets it, not run
	// (which the tests call in their own process).
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		runtime.GOMAXPROCS(serveProcs(os.Getenv, runtime.GOMAXPROCS(0)))
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(serveGCPercent)
		}
		if addr := os.Getenv(profileAddrEnv); addr != "" {
			if err := startProfiling(addr); err != nil {
				fmt.Fprintln(os.Stderr, "threadbox:", err)
				os.Exit(2)
			}
		}
	}
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	var ce *configError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ce), errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "threadbox:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "threadbox:", err)
		os.Exit(1)
	}
}

// serveGCPercent is the garbage collector's target of serve unless GOGC
// is set: the heap may grow to five times what is live before a cycle
// (Go's default is twice). serve's live heap is a few MiB, so the default
// ran a cycle every few dozen Messages API requests and the collector took
// an eighth of the server's CPU at concurrency 16; at 400 it takes a
// fiftieth, for some 10-20 MiB more memory (docs/benchmarks.md).
const serveGCPercent = 400

var errUsage = errors.New("usage")

const usage = `threadbox — a self-hosted backend for AI chat workspaces

Usage:
  threadbox serve                      serve the HTTP API (and migrate first)
  threadbox migrate                    apply database migrations and exit
  threadbox doctor                     check what serve needs and say how to fix it
  threadbox dev                        a development run (make run): prepare a sandbox backend, doctor, serve
  threadbox admin bootstrap --org NAME --email EMAIL [--password-file F]
  threadbox token create --email EMAIL [--name NAME] [--ttl DURATION]
  threadbox token revoke ID
  threadbox token list --email EMAIL

Every command takes --help. Settings come from the environment (see the README's
Configuration).
`

// commands are the program's commands by name, each run with the
// arguments after its name.
var commands = map[string]func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error{
	"serve":   cmdServe,
	"migrate": cmdMigrate,
	"doctor":  cmdDoctor,
	"dev":     cmdDev,
	"admin":   cmdAdmin,
	"token":   cmdToken,
}

// run is the whole program; main only wires the process to it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return fmt.Errorf("%w: no command given", errUsage)
		}
		return nil
	}
	if command, ok := commands[args[0]]; ok {
		return command(ctx, args[1:], getenv, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

func newFlags(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: threadbox %s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// parseAndLoad parses a command's args into fs, then loads the
// configuration from the environment.
func parseAndLoad(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	if err := parseFlags(fs, args); err != nil {
		return Config{}, err
	}
	return loadConfig(getenv)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// openStore opens and migrates the database.
func openStore(ctx context.Context, cfg Config) (*store.Store, error) {
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if _, err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// openAuth loads the config and opens the store and the auth use cases over
// it, for the admin commands; the caller closes the store.
func openAuth(ctx context.Context, getenv func(string) string) (*auth.Service, func() error, error) {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return nil, nil, err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	a, err := newAuth(cfg, st)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return a, st.Close, nil
}

// newAuth returns the auth use cases over st. A revocation through them is
// told to every server on the database (an operator's included), which
// ends the requests bound to the token there.
func newAuth(cfg Config, st *store.Store) (*auth.Service, error) {
	key, _, err := jwt.LoadOrCreateKey(cfg.JWTKeyFile)
	if err != nil {
		return nil, err
	}
	return auth.New(st.Accounts(), st.Logins(), jwt.New(key, cfg.JWTIssuer, cfg.JWTAudience), auth.Config{
		SessionTTL:      cfg.SessionTTL,
		AccessTTL:       cfg.AccessTTL,
		EmailLoginLimit: cfg.LoginEmailLimit,
		AddrLoginLimit:  cfg.LoginAddrLimit,
		LoginWindow:     cfg.LoginWindow,
		PasswordChecks:  cfg.LoginChecks,
		Notices:         st.Notices(),
	}), nil
}

func cmdMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", "migrate", stdout)
	cfg, err := parseAndLoad(fs, args, getenv)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s at schema version %d\n", st.Dialect(), v)
	return nil
}

func cmdAdmin(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "bootstrap" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			fmt.Fprintln(stdout, "Usage: threadbox admin bootstrap --org NAME --email EMAIL [--password-file F]")
			return nil
		}
		return fmt.Errorf("%w: threadbox admin bootstrap --org NAME --email EMAIL [--password-file F]", errUsage)
	}
	fs := newFlags("admin bootstrap", "admin bootstrap --org NAME --email EMAIL [--password-file F]\n\nCreates the org and an admin user when missing (idempotent), then prints a new API token for that user.", stdout)
	orgName := fs.String("org", "", "organization name (required)")
	email := fs.String("email", "", "admin email (required)")
	pwFile := fs.String("password-file", "", "file holding the admin's password for the web login")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *orgName == "" || *email == "" {
		return fmt.Errorf("%w: --org and --email are required", errUsage)
	}
	var password string
	if *pwFile != "" {
		b, err := os.ReadFile(*pwFile)
		if err != nil {
			return fmt.Errorf("admin bootstrap: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	a, closeStore, err := openAuth(ctx, getenv)
	if err != nil {
		return err
	}
	defer closeStore()
	iss, created, err := a.Bootstrap(ctx, *orgName, *email, password)
	if err != nil {
		return fmt.Errorf("admin bootstrap: %w", err)
	}
	if created {
		fmt.Fprintf(stderr, "created org %q and admin %s\n", *orgName, *email)
	}
	fmt.Fprintln(stdout, iss.Token)
	return nil
}

func cmdToken(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: threadbox token create|revoke|list", errUsage)
	}
	sub, rest := args[0], args[1:]
	if sub == "--help" || sub == "-h" {
		fmt.Fprintln(stdout, "Usage: threadbox token create --email EMAIL [--name NAME] [--ttl DURATION] | token revoke ID | token list --email EMAIL")
		return nil
	}
	var (
		fs    *flag.FlagSet
		email *string
		name  *string
		ttl   *time.Duration
	)
	switch sub {
	case "create":
		fs = newFlags("token create", "token create --email EMAIL [--name NAME] [--ttl DURATION]", stdout)
		email = fs.String("email", "", "the user's email (required)")
		name = fs.String("name", "cli", "a label for the token")
		ttl = fs.Duration("ttl", 0, "lifetime such as 720h (default one year)")
	case "list":
		fs = newFlags("token list", "token list --email EMAIL", stdout)
		email = fs.String("email", "", "the user's email (required)")
	case "revoke":
		fs = newFlags("token revoke", "token revoke ID", stdout)
	default:
		return fmt.Errorf("%w: unknown token command %q", errUsage, sub)
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if (sub == "create" || sub == "list") && *email == "" {
		return fmt.Errorf("%w: --email is required", errUsage)
	}
	if sub == "revoke" && fs.NArg() != 1 {
		return fmt.Errorf("%w: threadbox token revoke ID", errUsage)
	}
	a, closeStore, err := openAuth(ctx, getenv)
	if err != nil {
		return err
	}
	defer closeStore()
	switch sub {
	case "create":
		iss, err := a.CreateAPITokenFor(ctx, *email, *name, *ttl)
		if err != nil {
			return fmt.Errorf("token create: %w", err)
		}
		fmt.Fprintln(stdout, iss.Token)
	case "list":
		ts, err := a.TokensByEmail(ctx, *email)
		if err != nil {
			return fmt.Errorf("token list: %w", err)
		}
		fmt.Fprintf(stdout, "%-32s %-16s %-25s %s\n", "ID", "NAME", "EXPIRES", "STATE")
		for _, t := range ts {
			state := "active"
			if t.RevokedAt() != nil {
				state = "revoked"
			} else if !t.Usable(time.Now()) {
				state = "expired"
			}
			fmt.Fprintf(stdout, "%-32s %-16s %-25s %s\n", t.ID(), t.Name(), t.ExpiresAt().Format(time.RFC3339), state)
		}
	case "revoke":
		if err := a.Revoke(ctx, fs.Arg(0)); err != nil {
			return fmt.Errorf("token revoke: %w", err)
		}
		fmt.Fprintf(stdout, "revoked %s\n", fs.Arg(0))
	}
	return nil
}

func cmdServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve\n\nServes the HTTP API on LISTEN_ADDR; migrates the database first.", stdout)
	cfg, err := parseAndLoad(fs, args, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	sys, err := wire(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer sys.Close()
	if err := firstStart(ctx, sys.store.Accounts(), sys.auth, cfg, stdout); err != nil {
		return err
	}
	checkBackends(ctx, sys.backends, log)
	// The revocations of sandbox tokens an earlier process gave up (its
	// database down until it stopped) are made now; those that fail are
	// retried as at a turn's end.
	if err := sys.sandbox.env.RevokeKept(); err != nil {
		log.Error("kept revocations of sandbox tokens not read", "cause", err.Error())
	}
	creds, err := contentCredentials(getenv, cfg.DataDir, sys.admin, log)
	if err != nil {
		return err
	}
	// The background work: leases renewed while this process lives (and
	// given back when it stops, so the next start takes over at once), and
	// the sweepers: the sandboxes' (whose first sweep adopts or removes
	// what an earlier process left), the stores' and the kept revocations
	// of sandbox tokens.
	bgctx, stopBackground := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	defer func() {
		stopBackground()
		bg.Wait()
	}()
	bg.Add(8)
	go func() {
		defer bg.Done()
		sys.batches.Run(bgctx)
	}()
	go func() {
		defer bg.Done()
		sys.usage.Run(bgctx)
	}()
	go func() {
		defer bg.Done()
		sys.containers.RunPool(bgctx)
	}()
	go func() {
		defer bg.Done()
		watchNotices(bgctx, sys.store.Notices(), sys.auth, sys.containers.HandBack, sys.sandbox.env.RevokeKept, log)
	}()
	go func() {
		defer bg.Done()
		sys.leases.Run(bgctx, func(err error) { log.Error("leases", "cause", err.Error()) })
	}()
	go func() {
		defer bg.Done()
		sys.containers.Run(bgctx)
	}()
	go func() {
		defer bg.Done()
		collectBlobs(bgctx, sys, cfg.SweepInterval, log)
	}()
	go func() {
		defer bg.Done()
		revokeKeptEvery(bgctx, cfg.SweepInterval, sys.sandbox.env.RevokeKept, log)
	}()
	srv := web.New(web.Services{
		Auth:       sys.auth,
		Admin:      sys.admin,
		Workspace:  sys.workspace,
		Files:      sys.files,
		Turns:      sys.turns,
		Skills:     sys.skills,
		Batches:    sys.batches,
		Counter:    sys.messages,
		Backends:   backends.New(sys.backends).WithWarmPool(warmPool(sys.containers)),
		Ready:      sys.store.Ready,
		BlobsReady: sys.blobs.Ready,
		Usage:      sys.usage,
		// Content Credentials: generated media signed on download.
		Credentials: creds,
		MCP:         sys.mcp,
	}, log, web.Options{MaxUploadBytes: cfg.MaxUploadBytes, TrustedProxies: cfg.TrustedProxies, Observer: sys.metrics, Metrics: sys.metrics.Handler(), MetricsToken: cfg.MetricsToken})
	sys.sandbox.setServe(srv.ServeSandboxConn)

	errc := make(chan error, 1)
	go func() { errc <- srv.Listen(cfg.ListenAddr) }()
	log.Info("threadbox serving", "addr", cfg.ListenAddr, "database", sys.store.Dialect(), "sandbox_backends", len(sys.backends), "data_dir", cfg.DataDir, "procs", runtime.GOMAXPROCS(0))
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", cfg.ShutdownGrace.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	// Detached chat turns get most of the grace to end; those still
	// running then end as failed ("the server stopped"), and their
	// followers' streams end with them.
	dctx, dcancel := context.WithTimeout(sctx, cfg.ShutdownGrace*3/4)
	sys.turns.StopDetached(dctx)
	dcancel()
	// Sandboxes outlive the process (the next one adopts them): their
	// sandbox time so far is metered now.
	sys.containers.MeterAll(sctx)
	shutdownErr := srv.Shutdown(sctx)
	// No request comes in any more. Sandboxes whose backend checkpoints
	// them (gvisor's, which end with this process) are saved and stopped
	// (their time metered), and their next use restores them. Meanwhile
	// the revocations of ended turns' sandbox tokens that failed and wait
	// for a retry are retried at once and waited for: a retry would end
	// with the process, and the token stay usable until it expires.
	cctx, ccancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	revoked := make(chan struct{})
	go func() {
		defer close(revoked)
		sys.sandbox.env.Finish(cctx)
	}()
	if saved := sys.containers.Suspend(cctx); len(saved) > 0 {
		log.Info("sandboxes checkpointed for the restart", "count", len(saved))
	}
	<-revoked
	ccancel()
	if shutdownErr != nil {
		return fmt.Errorf("serve: shutdown: %w", shutdownErr)
	}
	return nil
}

// watchNotices serves, until ctx ends, what the servers on the database
// tell each other: another server asking for a sandbox this one holds gets
// it from handBack once no command runs in it, and a token revoked on any
// server ends the requests bound to it here (docs/scale-out.md). Each time
// it listens anew, the requests bound to tokens revoked meanwhile end, and
// revokeKept (nil: none) makes the revocations another server sharing
// DATA_DIR gave up while the database was down (bridge.TurnEnv.RevokeKept).
func watchNotices(ctx context.Context, n store.Notices, a *auth.Service, handBack func(string), revokeKept func() error, log *slog.Logger) {
	n.Watch(ctx, store.Handlers{
		WantedLease:  handBack,
		RevokedToken: a.Revoked,
		Listening: func() {
			if err := a.EndRevokedBound(ctx); err != nil && ctx.Err() == nil {
				log.Error("requests bound to revoked tokens not checked", "cause", err.Error())
			}
			if revokeKept == nil {
				return
			}
			if err := revokeKept(); err != nil {
				log.Error("kept revocations of sandbox tokens not read", "cause", err.Error())
			}
		},
	})
}

// revokeKeptEvery makes, every sweep interval until ctx ends, the
// revocations of sandbox tokens kept in DATA_DIR (revokeKept:
// bridge.TurnEnv.RevokeKept): those this server gave up while it runs (the
// database down for longer than their retries) and those another server
// sharing the folder kept, even when this one never lost its database.
// It runs beside the other sweeps, so that a kept token's first attempt
// on a database that is down delays none of them.
func revokeKeptEvery(ctx context.Context, every time.Duration, revokeKept func() error, log *slog.Logger) {
	lease.Every(ctx, every, func() {
		if err := revokeKept(); err != nil && ctx.Err() == nil {
			log.Error("kept revocations of sandbox tokens not read", "cause", err.Error())
		}
	})
}

// firstStart bootstraps an admin on an empty database and tells the operator
// how to log in.
func firstStart(ctx context.Context, accounts store.Accounts, a *auth.Service, cfg Config, stdout io.Writer) error {
	n, err := accounts.OrgCount(ctx)
	if err != nil || n > 0 {
		return err
	}
	b := make([]byte, 12)
	rand.Read(b)
	password := base64.RawURLEncoding.EncodeToString(b)
	const email = "admin@threadbox.local"
	iss, _, err := a.Bootstrap(ctx, "default", email, password)
	if err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	fmt.Fprintf(stdout, "threadbox: first start — created org \"default\" with an admin.\n  web login: %s  email: %s  password: %s\n  API token: %s\n  (shown once; more with: threadbox token create --email %s)\n",
		cfg.PublicURL, email, password, iss.Token, email)
	return nil
}

// collectBlobs deletes, every interval until ctx ends, the artifact blobs
// no artifact references any more (past the workspace's grace period), the
// files snapshots of threads that no longer exist, the forks whose server
// died while it made them, the event logs of turns past their retention,
// and the token records that expired or were revoked more than a day ago.
func collectBlobs(ctx context.Context, sys *system, every time.Duration, log *slog.Logger) {
	lease.Every(ctx, every, func() {
		// One replica of a deployment collects (the holder of the
		// collector lease, renewed with this process's other leases):
		// each collection lists the whole store.
		if mine, err := sys.leases.Acquire(ctx, "artifact-blob-collector"); err == nil && mine {
			n, err := sys.workspace.CollectArtifactBlobs(ctx)
			if err != nil && ctx.Err() == nil {
				log.Error("artifact blob collection failed", "cause", err.Error())
			}
			if n > 0 {
				log.Info("artifact blobs collected", "removed", n)
			}
		} else if err != nil && ctx.Err() == nil {
			log.Error("artifact blob collection: collector lease", "cause", err.Error())
		}
		for _, sw := range []struct {
			run              func(context.Context) (int, error)
			failed, done, of string
		}{
			{sys.files.SweepExpired, "expired files not deleted", "expired files deleted", "files"},
			{sys.workspace.SweepSnapshots, "orphan snapshots not removed", "orphan snapshots removed", "threads"},
			{sys.workspace.SweepUnfinishedForks, "unfinished forks not removed", "unfinished forks removed", "threads"},
			{sys.turns.PruneTurns, "turn logs not pruned", "turn logs pruned", "turns"},
			{sys.auth.SweepTokens, "ended tokens not deleted", "ended tokens deleted", "tokens"},
		} {
			if n, err := sw.run(ctx); err != nil && ctx.Err() == nil {
				log.Error(sw.failed, "cause", err.Error())
			} else if n > 0 {
				log.Info(sw.done, sw.of, n)
			}
		}
	})
}
