package main

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// window is a span of time in which something was the case.
type window struct {
	kind       string
	start, end time.Time
}

// soak is one run.
type soak struct {
	cfg   config
	srv   *server
	fs    *dataFS // DATA_DIR's own filesystem (-data-fs), or nil
	dockd *privateDockerd
	up    *upstream
	st    *stats
	admin *client
	users []*user

	mu       sync.Mutex
	faults   []window // injected faults
	policy   []window // policy switches off
	skill    [2]string
	samples  []sample
	procBase sample
	baseFds  map[string]int
	sigterm  []string
	findings map[string]int
	repl     replTally // repl.go
}

// finding records something the run saw that is not an invariant broken
// but worth reporting.
func (s *soak) finding(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.findings == nil {
		s.findings = map[string]int{}
	}
	s.findings[what]++
}

// faultGrace is how long after a fault an error it explains may still come.
const faultGrace = 30 * time.Second

// hangLimit is the longest an operation may take before it counts as hung.
const hangLimit = 90 * time.Second

func overlaps(ws []window, start, end time.Time, grace time.Duration, kind string) bool {
	for _, w := range ws {
		if (kind == "" || strings.HasPrefix(w.kind, kind)) && !w.start.After(end) && !w.end.Add(grace).Before(start) {
			return true
		}
	}
	return false
}

func (s *soak) inFault(start, end time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return overlaps(s.faults, start, end, faultGrace, "")
}

func (s *soak) policyOff(start, end time.Time, kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return overlaps(s.policy, start, end, time.Second, kind)
}

func (s *soak) codeOffDuring(start, end time.Time) bool {
	return s.policyOff(start, end, "codeExecution")
}

func (s *soak) currentSkill() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skill[0], s.skill[1]
}

// account records an operation's outcome, sorting errors into designed
// ones and the rest.
func (s *soak) account(name string, start time.Time, err error) {
	end := time.Now()
	if d := end.Sub(start); d > hangLimit {
		// Whatever its answer, an operation this slow hung: no fault
		// explains it (the longest designed wait is a 20 s upstream hang
		// per model step).
		if err == nil {
			err = errors.New("no error")
		}
		s.st.bad(name, fmt.Errorf("hung for %v: %w", d.Round(time.Second), err))
		return
	}
	if err == nil {
		s.st.ok(name, end.Sub(start))
		return
	}
	if errors.Is(err, errSkip) {
		return
	}
	if kind, ok := s.designedKind(name, start, end, err); ok {
		s.st.designed(name, kind)
		return
	}
	s.st.bad(name, err)
}

// designedKind says whether err is an answer the design provides for in
// the circumstances of the operation, and names it.
func (s *soak) designedKind(name string, start, end time.Time, err error) (string, bool) {
	if errors.Is(err, errPolicyText) {
		return "no code (policy off)", true
	}
	var te *toolError
	if errors.As(err, &te) {
		return "command could not run during fault", s.cfg.chaos && s.inFault(start, end)
	}
	var nk *notKept
	if errors.As(err, &nk) {
		// The artifact store is on the server's disk.
		s.mu.Lock()
		full := overlaps(s.faults, start, end, faultGrace, "disk-full")
		s.mu.Unlock()
		return "output not kept while the disk was full", s.cfg.chaos && full
	}
	var se *streamError
	if errors.As(err, &se) {
		return "stream error during fault", s.cfg.chaos && s.inFault(start, end)
	}
	ae := asAPIError(err)
	if ae == nil {
		return "", false
	}
	if ae.Transport != nil {
		return "connection failed during fault", s.inFault(start, end)
	}
	if !ae.enveloped() {
		return "", false
	}
	kind := fmt.Sprintf("%d %s", ae.Status, ae.Type)
	switch {
	case ae.Status == 403 && ae.Type == "permission_error":
		return kind + " (policy)", s.policyOff(start, end, "")
	case ae.Status == 404 && strings.HasPrefix(name, "messages"):
		return kind + " (container expired)", strings.Contains(ae.Message, "expire") || strings.Contains(ae.Message, "not found")
	case ae.Status == 404 && name == "turn-skill":
		return kind + " (skill replaced)", true
	case (ae.Status == 429 && ae.Type == "rate_limit_error") || (ae.Status >= 500 && ae.Type == "api_error"):
		return kind, s.cfg.chaos && s.inFault(start, end)
	case ae.Status == 409 && strings.HasPrefix(name, "turn"):
		return kind + " (turn running)", s.cfg.chaos && s.inFault(start, end)
	}
	return "", false
}

// skillArchive is a zip of one skill whose SKILL.md holds marker.
func skillArchive(name, marker string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create(name + "/SKILL.md")
	fmt.Fprintf(w, "---\nname: %s\ndescription: A skill of the soak.\n---\n%s\n", name, marker)
	_ = zw.Close()
	return buf.Bytes()
}

// newSkill uploads a skill and makes it the one users' turns load; the
// one before it is deleted a little later.
func (s *soak) newSkill(ctx context.Context, n int) error {
	name := fmt.Sprintf("soak-skill-%d", n)
	marker := "soak-skill-" + randHex(6)
	var sk struct{ ID, Name string }
	b, err := s.admin.do(ctx, "POST", "/api/v1/app/skills", bytes.NewReader(skillArchive(name, marker)), "application/zip")
	if err != nil {
		return err
	}
	if err := jsonUnmarshal(b, &sk); err != nil || sk.Name != name {
		return wrongf("skill upload answered %.200s", b)
	}
	s.mu.Lock()
	s.skill = [2]string{name, marker}
	s.mu.Unlock()
	return nil
}

// retry repeats f until it succeeds or a minute passes (the server may be
// restarting).
func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// adminLoop switches policy features off and on again and replaces the
// skill, until ctx ends.
func (s *soak) adminLoop(ctx context.Context, rnd *mrand.Rand) {
	switches := []struct{ kind, on, off string }{
		{"codeExecution", `{"codeExecution":{"enabled":true}}`, `{"codeExecution":{"enabled":false}}`},
		{"downloads", `{"downloads":{"uploaded":true,"generated":true}}`, `{"downloads":{"uploaded":false}}`},
		{"uploads", `{"uploads":{"enabled":true}}`, `{"uploads":{"enabled":false}}`},
	}
	skills := 1
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10*time.Second + time.Duration(rnd.Int64N(int64(10*time.Second)))):
		}
		if rnd.IntN(3) == 0 {
			skills++
			start := time.Now()
			err := s.newSkill(context.WithoutCancel(ctx), skills)
			s.account("admin-skill", start, err)
			continue
		}
		sw := switches[rnd.IntN(len(switches))]
		start := time.Now()
		s.mu.Lock()
		i := len(s.policy)
		s.policy = append(s.policy, window{sw.kind, start, time.Now().Add(time.Hour)})
		s.mu.Unlock()
		patch := func(body string) error {
			return s.admin.json(context.WithoutCancel(ctx), "PATCH", "/api/v1/app/org/features", jsonRaw(body), nil)
		}
		err := retry(ctx, func() error { return patch(sw.off) })
		time.Sleep(3 * time.Second)
		if err2 := retry(context.WithoutCancel(ctx), func() error { return patch(sw.on) }); err2 != nil {
			err = err2
		}
		s.mu.Lock()
		s.policy[i].end = time.Now()
		s.mu.Unlock()
		s.account("admin-policy", start, err)
	}
}

// faultLoop injects the configured faults at random times until ctx ends.
func (s *soak) faultLoop(ctx context.Context, rnd *mrand.Rand) {
	for {
		wait := s.cfg.faultEvery/2 + time.Duration(rnd.Int64N(int64(s.cfg.faultEvery)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		kind := s.cfg.faults[rnd.IntN(len(s.cfg.faults))]
		start := time.Now()
		// The window opens before the fault, so that the errors it causes
		// meanwhile are known as its own.
		s.mu.Lock()
		i := len(s.faults)
		s.faults = append(s.faults, window{kind: kind, start: start, end: start.Add(time.Hour)})
		s.mu.Unlock()
		desc, err := s.inject(ctx, kind, rnd)
		w := window{kind: kind + desc, start: start, end: time.Now()}
		if strings.HasPrefix(kind, "upstream-") {
			w.end = w.end.Add(time.Minute)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: fault %s: %v\n", kind, err)
			w.kind = kind + " (failed)"
		}
		s.mu.Lock()
		s.faults[i] = w
		s.mu.Unlock()
		fmt.Fprintf(os.Stderr, "soak: %s fault %s%s\n", start.Format("15:04:05"), kind, desc)
	}
}

// inject applies one fault.
func (s *soak) inject(ctx context.Context, kind string, rnd *mrand.Rand) (string, error) {
	switch kind {
	case "kill9":
		s.srv.kill()
		time.Sleep(500 * time.Millisecond)
		return "", s.restart(ctx)
	case "sigterm":
		if !s.srv.term(20 * time.Second) {
			s.mu.Lock()
			s.sigterm = append(s.sigterm, time.Now().Format("15:04:05"))
			s.mu.Unlock()
		}
		return "", s.restart(ctx)
	case "docker-kill":
		b, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--filter", "status=running", "--filter", "label=threadbox.instance="+s.srv.instance).Output()
		if err != nil {
			return "", fmt.Errorf("docker ps: %w", err)
		}
		ids := strings.Fields(string(b))
		if len(ids) == 0 {
			return " (no running sandbox)", nil
		}
		id := ids[rnd.IntN(len(ids))]
		if out, err := exec.CommandContext(ctx, "docker", "kill", id).CombinedOutput(); err != nil {
			return "", fmt.Errorf("docker kill: %w: %s", err, out)
		}
		return "", nil
	case "pg-restart":
		pgctl, err := exec.LookPath("pg_ctl")
		if err != nil {
			m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
			if len(m) == 0 {
				return "", fmt.Errorf("no pg_ctl: %w", err)
			}
			pgctl = m[len(m)-1]
		}
		// A log file, so that the server does not keep our output pipe open.
		cmd := pgctl + " -D " + s.cfg.pgData + " -l " + filepath.Join(filepath.Dir(s.cfg.pgData), "pg.log") + " restart -m fast -w"
		var c *exec.Cmd
		if os.Geteuid() == 0 {
			c = exec.CommandContext(ctx, "su", "-s", "/bin/sh", "postgres", "-c", cmd)
		} else {
			c = exec.CommandContext(ctx, "sh", "-c", cmd)
		}
		out, err := c.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("pg_ctl restart: %w: %s", err, out)
		}
		return "", nil
	case "disk-full":
		return s.diskFull(ctx)
	case "docker-restart":
		if s.dockd != nil {
			return " (the soak's own daemon)", s.dockd.restart(ctx)
		}
		out, err := exec.CommandContext(ctx, "systemctl", "restart", "docker").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("restart docker: %w: %s", err, out)
		}
		return "", nil
	}
	if k, ok := strings.CutPrefix(kind, "upstream-"); ok && s.up != nil {
		s.up.arm(k, 3)
		return "", nil
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// restart starts threadbox again and takes its process baseline.
func (s *soak) restart(ctx context.Context) error {
	if err := s.srv.run(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	_, _ = s.admin.do(context.WithoutCancel(ctx), "GET", "/api/v1/app/me", nil, "")
	if smp, err := s.srv.probe(ctx); err == nil {
		s.mu.Lock()
		s.procBase, s.baseFds = smp, fdKinds(smp.pid)
		s.mu.Unlock()
	}
	return nil
}

// sampleLoop reads the host resources every two seconds.
func (s *soak) sampleLoop(ctx context.Context) {
	for {
		if smp, err := s.srv.probe(ctx); err == nil {
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// run runs the whole soak and prints its report; ok is false when an
// invariant broke.
func run(ctx context.Context, cfg config, out io.Writer) (ok bool, err error) {
	fmt.Fprintf(out, "threadbox-soak: seed %d, %d users, %v, model %s, database %s, chaos %v, faults %s\n",
		cfg.seed, cfg.users, cfg.duration, cfg.model, dbName(cfg), cfg.chaos, orNone(cfg.faults))
	work, err := os.MkdirTemp("", "threadbox-soak-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(work)
	s := &soak{cfg: cfg, st: newStats()}
	if cfg.model == "fake" {
		s.up = newUpstream()
		defer s.up.srv.Close()
		s.cfg.upstreamURL = s.up.srv.URL()
	}
	if cfg.dockerd != "" {
		if s.dockd, err = startPrivateDockerd(ctx, cfg.dockerd, "threadbox-sandbox:latest"); err != nil {
			return false, err
		}
		// Stopped after the server's clean-up (deferred later, run first).
		defer func() {
			if err := s.dockd.close(); err != nil {
				fmt.Fprintln(os.Stderr, "soak:", err)
			}
		}()
	}
	dataRoot := work
	if cfg.dataFS > 0 {
		if s.fs, err = newDataFS(ctx, work, cfg.dataFS); err != nil {
			return false, err
		}
		// Unmounted after the server's clean-up (deferred later, run first).
		defer func() {
			if err := s.fs.close(); err != nil {
				fmt.Fprintln(os.Stderr, "soak:", err)
			}
		}()
		dataRoot = s.fs.mount
	}
	if s.srv, err = newServer(s.cfg, work, dataRoot); err != nil {
		return false, err
	}
	var left []string
	cleaned := false
	defer func() {
		if !cleaned {
			s.srv.cleanUp()
		}
	}()
	token, err := s.srv.bootstrap(ctx)
	if err != nil {
		return false, err
	}
	if err := s.srv.run(ctx); err != nil {
		return false, err
	}
	baseline, err := s.srv.probe(ctx)
	if err != nil {
		return false, err
	}
	hc := newHTTPClient()
	s.admin = &client{base: s.srv.base, hc: hc, token: func() string { return token }}
	if err := s.newSkill(ctx, 1); err != nil {
		return false, fmt.Errorf("first skill: %w", err)
	}
	seeds := mrand.New(mrand.NewPCG(cfg.seed, cfg.seed^0x5eed))
	for i := 0; i < cfg.users; i++ {
		u := &user{n: i, s: s, led: newLedger(), rnd: mrand.New(mrand.NewPCG(seeds.Uint64(), seeds.Uint64()))}
		u.c = &client{base: s.srv.base, hc: hc, token: u.currentToken}
		if err := u.setUp(ctx, s.admin); err != nil {
			return false, fmt.Errorf("user %d: %w", i, err)
		}
		s.users = append(s.users, u)
	}
	if s.procBase, err = s.srv.probe(ctx); err != nil {
		return false, err
	}
	s.baseFds = fdKinds(s.procBase.pid)

	// The load.
	loadStart := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() { s.sampleLoop(sctx); close(sampled) }()
	lctx, stopLoad := context.WithTimeout(ctx, cfg.duration)
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.adminLoop(lctx, mrand.New(mrand.NewPCG(seeds.Uint64(), 1))) }()
	if cfg.chaos && len(cfg.faults) > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); s.faultLoop(lctx, mrand.New(mrand.NewPCG(seeds.Uint64(), 2))) }()
	}
	for _, u := range s.users {
		wg.Add(1)
		go func() { defer wg.Done(); u.loop(lctx) }()
	}
	wg.Wait()
	stopLoad()
	loadEnd := time.Now()
	if s.srv.pid() == 0 {
		if err := s.restart(ctx); err != nil {
			return false, err
		}
	}
	fmt.Fprintf(os.Stderr, "soak: load done after %v; verifying\n", loadEnd.Sub(loadStart).Round(time.Second))

	if cfg.plantBeforeVerify != nil {
		cfg.plantBeforeVerify(s)
	}
	// Turns interrupted by faults end failed once their leases expire.
	var lost, running []string
	for deadline := time.Now().Add(40 * time.Second); ; {
		lost, running = nil, nil
		for _, u := range s.users {
			l, r, err := u.led.verify(ctx, u.c)
			if err != nil {
				return false, fmt.Errorf("verify user %d: %w", u.n, err)
			}
			lost, running = append(lost, l...), append(running, r...)
		}
		if len(running) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}

	// Clean up what the users made, then wait for the sweeps.
	var threads, markers, files, artifacts, unknownThreads int
	for _, u := range s.users {
		th, mk, fi, ar := u.led.counts()
		threads, markers, files, artifacts = threads+th, markers+mk, files+fi, artifacts+ar
		for _, t := range u.led.liveThreads() {
			if err := u.deleteThreadAtLast(ctx, t.id); err != nil {
				return false, fmt.Errorf("clean up thread %s: %w", t.id, err)
			}
		}
		// A fork or a new thread whose answer a fault cut may have been
		// made all the same: the user never learned its id, and deletes
		// it as a user would, from the list of its threads.
		n, err := u.deleteUnknownThreads(ctx)
		if err != nil {
			return false, fmt.Errorf("clean up user %d's other threads: %w", u.n, err)
		}
		unknownThreads += n
	}
	var final sample
	settled := time.Now()
	for deadline := time.Now().Add(cfg.settle); ; {
		if final, err = s.srv.probe(ctx); err != nil {
			return false, err
		}
		if (final.containers <= baseline.containers && final.mounts <= baseline.mounts && final.loops <= baseline.loops &&
			final.entries <= baseline.entries) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	// One more sweep for what the last one released; the soak's own
	// idle connections are closed so that they do not count as the
	// server's open files.
	hc.CloseIdleConnections()
	time.Sleep(2 * cfg.sweep)
	if cfg.plantBeforeFinal != nil {
		cfg.plantBeforeFinal(s)
	}
	if final, err = s.srv.probe(ctx); err != nil {
		return false, err
	}
	settleTook := time.Since(settled)
	finalFds, finalSockets := fdKinds(final.pid), sockets(final.pid)
	stopSampling()
	<-sampled

	s.mu.Lock()
	// RSS growth is judged over the last half of the run, on the process
	// that served longest in it (a restart starts a new one).
	byPid := map[int][]int64{}
	threadsByPid := map[int][]int{}
	peak := baseline
	for _, smp := range s.samples {
		peak = peakOf(peak, smp)
		if smp.pid != 0 && smp.at.After(loadStart.Add(cfg.duration/2)) && smp.at.Before(loadEnd) {
			byPid[smp.pid] = append(byPid[smp.pid], smp.rss)
			threadsByPid[smp.pid] = append(threadsByPid[smp.pid], smp.threads)
		}
	}
	var rssHalf []int64
	var threadsHalf []int
	for pid, rs := range byPid {
		if len(rs) > len(rssHalf) {
			rssHalf, threadsHalf = rs, threadsByPid[pid]
		}
	}
	procBase := s.procBase
	faults := append([]window(nil), s.faults...)
	sigterm := append([]string(nil), s.sigterm...)
	repl := s.repl
	s.mu.Unlock()

	left = s.srv.cleanUp()
	cleaned = true

	o := outcome{poolSlack: poolSlack(cfg), warmPool: cfg.warmPool, peakWarm: peak.warm, lost: lost, running: running, undesigned: s.st.undesigned, nUndesign: s.st.nUndesign,
		baseline: baseline, final: final, procBase: procBase, rssHalf: rssHalf, threadsHalf: threadsHalf, sigterm: sigterm, left: left, repl: repl}
	if s.up != nil {
		o.refused = s.up.refused()
	}
	ops, designed, bad := s.st.totals()
	fmt.Fprintf(out, "\nRun: %s, load %v, %d users, seed %d, %d operations (%d designed errors, %d other errors); sweeps settled in %v\n",
		time.Now().UTC().Format(time.RFC3339), loadEnd.Sub(loadStart).Round(time.Second), cfg.users, cfg.seed, ops, designed, bad, settleTook.Round(time.Second))
	fmt.Fprintf(out, "Ledger at the end: %d live threads, %d acknowledged turns in them, %d files, %d artifacts; all verified through the API, then the threads deleted, and %d more the users listed (made by a fork or new thread whose answer a fault cut)\n",
		threads, markers, files, artifacts, unknownThreads)
	fmt.Fprintf(out, "Faults injected: %s\n\n", faultSummary(faults))
	s.st.table(out)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| resource | baseline | peak | after the sweeps |")
	fmt.Fprintln(out, "|---|---:|---:|---:|")
	fmt.Fprintf(out, "| Docker containers of the instance (claimed warm ones among them) | %d | %d | %d |\n", baseline.containers, peak.containers, final.containers)
	fmt.Fprintf(out, "| unclaimed warm-pool sandboxes (pool of %d) | %d | %d | %d |\n", cfg.warmPool, baseline.warm, peak.warm, final.warm)
	fmt.Fprintf(out, "| mounts under DATA_DIR | %d | %d | %d |\n", baseline.mounts, peak.mounts, final.mounts)
	fmt.Fprintf(out, "| loop devices under DATA_DIR | %d | %d | %d |\n", baseline.loops, peak.loops, final.loops)
	fmt.Fprintf(out, "| container folders and disk images | %d | %d | %d |\n", baseline.entries, peak.entries, final.entries)
	fmt.Fprintf(out, "| disk: containers/, disks/, run/ | %s | %s | %s |\n", kib(baseline.diskBytes), kib(peak.diskBytes), kib(final.diskBytes))
	fmt.Fprintf(out, "| threadbox RSS (process baseline) | %s | %s | %s |\n", kib(procBase.rss), kib(peak.rss), kib(final.rss))
	fmt.Fprintf(out, "| threadbox OS threads | %d | %d | %d |\n", procBase.threads, peak.threads, final.threads)
	fmt.Fprintf(out, "| threadbox open fds | %d | %d | %d |\n", procBase.fds, peak.fds, final.fds)
	fmt.Fprintln(out)
	ok = printChecks(out, invariants(o))
	for _, u := range s.st.undesigned {
		fmt.Fprintln(out, "  other error:", u)
	}
	for _, l := range lost {
		fmt.Fprintln(out, "  lost:", l)
	}
	for f, n := range s.findings {
		fmt.Fprintf(out, "  finding (%d×): %s\n", n, f)
	}
	if cfg.keepLog != "" {
		if b, err := os.ReadFile(s.srv.logf.Name()); err == nil {
			_ = os.WriteFile(cfg.keepLog, b, 0o644)
		}
	}
	// The server's own account of the run: what it logged at ERROR
	// (failures it blames on itself) and at WARN.
	for _, level := range []string{"ERROR", "WARN"} {
		logged := s.srv.logLevels(level)
		msgs := make([]string, 0, len(logged))
		for m := range logged {
			msgs = append(msgs, m)
		}
		sort.Strings(msgs)
		for _, m := range msgs {
			fmt.Fprintf(out, "  server log %s (%d×): %s — %.240s\n", level, logged[m].n, m, logged[m].example)
		}
	}
	if final.fds > procBase.fds+fdSlack {
		fmt.Fprintf(out, "  sockets of threadbox after the sweeps:\n%s\n", finalSockets)
		for k, n := range finalFds {
			if n != s.baseFds[k] {
				fmt.Fprintf(out, "  open files %s: %d → %d\n", k, s.baseFds[k], n)
			}
		}
	}
	if !ok {
		fmt.Fprintf(out, "\nthreadbox log tail:\n%s\n", s.srv.tailString(4000))
	}
	return ok, nil
}

func peakOf(a, b sample) sample {
	a.containers, a.mounts, a.loops, a.entries = max(a.containers, b.containers), max(a.mounts, b.mounts), max(a.loops, b.loops), max(a.entries, b.entries)
	a.warm = max(a.warm, b.warm)
	a.diskBytes, a.rss, a.threads, a.fds = max(a.diskBytes, b.diskBytes), max(a.rss, b.rss), max(a.threads, b.threads), max(a.fds, b.fds)
	return a
}

func faultSummary(fs []window) string {
	n := map[string]int{}
	for _, f := range fs {
		n[f.kind]++
	}
	var out []string
	for k, c := range n {
		out = append(out, fmt.Sprintf("%s×%d", k, c))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d: %s", len(fs), strings.Join(out, ", "))
}

func dbName(cfg config) string {
	if cfg.databaseURL != "" {
		return "postgresql"
	}
	return "sqlite"
}

// poolSlack is the open files the server's idle database connections may
// hold beyond the start's: the store keeps up to 10 connections to
// PostgreSQL (a socket each) and up to 5 read-only ones to SQLite's file
// (infra/store), each with the database and its write-ahead log open,
// of which the start may have opened none.
func poolSlack(cfg config) int {
	if cfg.databaseURL != "" {
		return 10
	}
	return 2 * 5
}
