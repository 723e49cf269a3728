package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
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
	// kick wakes the loop to arm its safety reap (loop) when a command
	// starts while it is not armed; every and idleAfter are reapEvery and
	// reapIdleAfter.
	kick             chan struct{}
	every, idleAfter time.Duration
	wakes            atomic.Int64 // the loop's wake-ups, for tests

	mu      sync.Mutex
	waiting map[int]chan exited
	orphans int // orphans reaped so far, for logs and tests
	// early keeps, for a moment, the status of each child reaped while no
	// command had registered its pid: a command that exits before start
	// registers it finds its status here. seq numbers the reaps, so that
	// start accepts only a status reaped after its spawn began (an orphan
	// that ended earlier with the same pid freed it before the fork).
	early map[int]earlyExit
	seq   uint64
	// lastStart is when a command last registered, and armed whether the
	// loop waits with its safety reap armed.
	lastStart time.Time
	armed     bool
}

// earlyExit is an unregistered child's status and when it was reaped.
type earlyExit struct {
	exited
	seq uint64
	at  time.Time
}

// earlyKeep bounds how long an unregistered child's status is kept.
const earlyKeep = 10 * time.Second

// exited is how a registered child ended: its wait status and the CPU time
// (user plus system) of the child and of the descendants it waited for, from
// the rusage of wait4.
type exited struct {
	status syscall.WaitStatus
	cpu    time.Duration
}

func newReaper(log *slog.Logger) *reaper {
	r := &reaper{log: log, sig: make(chan os.Signal, 1), kick: make(chan struct{}, 1), every: reapEvery, idleAfter: reapIdleAfter,
		waiting: map[int]chan exited{}, early: map[int]earlyExit{}}
	// Notify before any child starts so that no SIGCHLD is missed.
	signal.Notify(r.sig, syscall.SIGCHLD)
	return r
}

// start runs spawn, which must start exactly one child and return its pid,
// and registers the pid. The spawn runs without the lock, so the loop
// reaps the commands that end while others start (holding it across the
// spawn queued every exit behind the starts: the tail of concurrent
// commands); a child that exits before it is registered is found among
// the early statuses reaped since the spawn began.
func (r *reaper) start(spawn func() (int, error)) (int, <-chan exited, error) {
	r.mu.Lock()
	since := r.seq
	r.mu.Unlock()
	pid, err := spawn()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan exited, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.early[pid]; ok && e.seq > since {
		delete(r.early, pid)
		r.orphans--
		ch <- e.exited
		return pid, ch, nil
	}
	r.waiting[pid] = ch
	r.lastStart = time.Now()
	if !r.armed {
		r.armed = true
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return pid, ch, nil
}

// Bounds of the loop's safety reap.
const (
	// reapEvery is how often the loop reaps without a SIGCHLD while
	// commands run.
	reapEvery = time.Second
	// reapIdleAfter is how long after the last command started it goes on
	// doing so with none waiting.
	reapIdleAfter = 10 * time.Second
)

// loop reaps children on every SIGCHLD until ctx ends. While commands run
// (and for idleAfter after the last one started) it also reaps every
// reapEvery, a safety net for a status that nothing else would collect;
// an idle agent waits for signals alone and so never wakes (its
// once-a-second wake-up cost about 0.27 ms of CPU a second on this
// project's test machines, a quarter of a CPU for 1,000 idle sandboxes).
// A start while the loop is not armed kicks it.
func (r *reaper) loop(ctx context.Context) {
	for {
		var tick <-chan time.Time
		r.mu.Lock()
		r.armed = len(r.waiting) > 0 || time.Since(r.lastStart) < r.idleAfter
		if r.armed {
			tick = time.After(r.every)
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-r.sig:
		case <-r.kick:
		case <-tick:
		}
		r.wakes.Add(1)
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
		ex := exited{status: ws, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
		r.mu.Lock()
		r.seq++
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		if !ok {
			r.orphans++
			now := time.Now()
			if len(r.early) >= 256 {
				for p, e := range r.early {
					if now.Sub(e.at) > earlyKeep {
						delete(r.early, p)
					}
				}
			}
			r.early[pid] = earlyExit{exited: ex, seq: r.seq, at: now}
		}
		r.mu.Unlock()
		if ok {
			ch <- ex
		} else {
			r.log.Debug("agent: reaped orphan", "pid", pid, "status", int(ws))
		}
	}
}
