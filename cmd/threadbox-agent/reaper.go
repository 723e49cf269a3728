package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// reaper owns every wait for child processes. Commands register their pid
// at start and get their own exit status back; every other child (an orphan
// reparented to the agent) is reaped and forgotten. This is the scheme of
// tini: one wait4(-1) loop, so no status is ever stolen from a waiter.
type reaper struct {
	log *slog.Logger
	sig chan os.Signal

	mu      sync.Mutex
	waiting map[int]chan exited
	orphans int // orphans reaped so far, for logs and tests
}

// exited is how a registered child ended: its wait status and the CPU time
// (user plus system) of the child and of the descendants it waited for, from
// the rusage of wait4.
type exited struct {
	status syscall.WaitStatus
	cpu    time.Duration
}

func newReaper(log *slog.Logger) *reaper {
	r := &reaper{log: log, sig: make(chan os.Signal, 1), waiting: map[int]chan exited{}}
	// Notify before any child starts so that no SIGCHLD is missed.
	signal.Notify(r.sig, syscall.SIGCHLD)
	return r
}

// start runs spawn, which must start exactly one child and return its pid,
// and registers the pid. The lock held across both keeps the loop from
// dropping the status of a child that exits before it is registered: the
// loop looks the pid up under the same lock.
func (r *reaper) start(spawn func() (int, error)) (int, <-chan exited, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := spawn()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan exited, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// loop reaps children on every SIGCHLD, and every second in case one was
// coalesced away, until ctx ends.
func (r *reaper) loop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sig:
		case <-tick.C:
		}
		r.reap()
	}
}

// reap collects every child that has exited.
func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		if !ok {
			r.orphans++
		}
		r.mu.Unlock()
		if ok {
			ch <- exited{status: ws, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
		} else {
			r.log.Debug("agent: reaped orphan", "pid", pid, "status", int(ws))
		}
	}
}
