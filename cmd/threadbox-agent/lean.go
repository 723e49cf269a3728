package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// An agent that has run nothing yet runs with one P (GOMAXPROCS=1), and
// with the number it would have had otherwise from its first command or
// loopback listener on. The Go runtime sizes its per-P caches and starts
// its threads from the Ps it has at start, so that one P from the
// process's start makes an idle sandbox's agent about 170 KiB of
// anonymous memory and a thread smaller, and its control group about
// 200 KiB (docs/benchmarks.md, density); setting it later, from main,
// saves only the thread. A warm sandbox waiting to be claimed is such an
// agent. The runtime reads GOMAXPROCS only at its start, so the agent
// executes itself again with it (startLean); leanEnv tells the new image
// it was done, and with which GOMAXPROCS the agent was started, which
// commands get back (environ) and the runtime's Ps too once the agent
// serves (leanProcs.busy).
const leanEnv = envPrefix + "LEAN"

// leanNone is leanEnv's value when the agent was started without GOMAXPROCS.
const leanNone = "-"

// leanProcs gives the runtime its Ps back once, on the first work.
type leanProcs struct {
	once    sync.Once
	restore func()
}

// busy restores the runtime's Ps, the first time only; a nil leanProcs
// (an agent that did not start lean) does nothing.
func (l *leanProcs) busy() {
	if l != nil {
		l.once.Do(l.restore)
	}
}

// startLean, in an agent not yet lean, executes the agent again with
// GOMAXPROCS=1 and does not return; when that fails it returns nil and
// the agent goes on as it is. In the lean agent it returns what restores
// its Ps.
func startLean(env []string) *leanProcs {
	if orig, ok := lookupEnv(env, leanEnv); ok {
		return &leanProcs{restore: func() { restoreProcs(orig) }}
	}
	_ = syscall.Exec("/proc/self/exe", os.Args, leanEnviron(env))
	return nil
}

// leanEnviron is env for the lean agent: GOMAXPROCS=1, and leanEnv with
// the GOMAXPROCS it had.
func leanEnviron(env []string) []string {
	orig, ok := lookupEnv(env, "GOMAXPROCS")
	if !ok || orig == "" {
		orig = leanNone
	}
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			out = append(out, kv)
		}
	}
	return append(out, "GOMAXPROCS=1", leanEnv+"="+orig)
}

// restoreProcs sets the runtime's Ps to what GOMAXPROCS=orig would have
// made them at start: orig's number, or the runtime's default (which
// follows the CPU limit).
func restoreProcs(orig string) {
	if n, err := strconv.Atoi(orig); err == nil && n > 0 {
		runtime.GOMAXPROCS(n)
		return
	}
	runtime.SetDefaultGOMAXPROCS()
}

// lookupEnv finds key's value in env.
func lookupEnv(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
