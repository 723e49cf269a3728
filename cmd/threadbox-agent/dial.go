package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Backoff bounds of the dialer: the first retry comes quickly (the host
// listens before the sandbox starts), later ones at most every maxRedial.
// A host gone for longer than awayRedial (stopped without its sandboxes,
// or dead) is dialed at most every awayMaxRedial: a thousand sandboxes left
// so dialing four times a second kept both CPUs of a 2-CPU host busy. A
// host adopting its sandboxes waits 3 s for each agent's dial, which
// awayMaxRedial stays well under.
const (
	minRedial     = 5 * time.Millisecond
	maxRedial     = 250 * time.Millisecond
	awayRedial    = 30 * time.Second
	awayMaxRedial = time.Second
	// sessionDrain bounds the wait for the commands of an ended connection
	// to exit before the next connection is served.
	sessionDrain = 2 * time.Second
)

// nextRedial returns the wait before the dial after one that failed
// having waited wait, when the host has been away for away.
func nextRedial(wait, away time.Duration) time.Duration {
	if away >= awayRedial {
		return min(2*wait, awayMaxRedial)
	}
	return min(2*wait, maxRedial)
}

// dialer serves the protocol on connections it makes to the host's unix
// socket, one at a time, with one server for the agent's life. When a
// connection ends (its host stopped or died) the commands it started are
// killed, as nobody is left to read their results, but the tagged
// sessions — the interpreters and terminals a host attaches to by tag —
// go on: the next host names them in its Release and attaches to them, so
// a restarted or adopting host finds an interpreter's variables and a
// terminal's output where they were. Until then their output waits (the
// pipes fill, the sessions block), and no frame of an older connection's
// command reaches a newer host.
type dialer struct {
	cfg    config
	reaper *reaper
	env    []string
	log    *slog.Logger

	mu  sync.Mutex
	srv *server
}

// current returns the server, or nil before the first connection.
func (d *dialer) current() *server {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.srv
}

// loop dials, serves and dials again until ctx ends.
func (d *dialer) loop(ctx context.Context) error {
	wait := minRedial
	lost := time.Now() // since when no host is connected
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "unix", d.cfg.dial)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			d.log.Debug("agent: dial", "socket", d.cfg.dial, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			wait = nextRedial(wait, time.Since(lost))
			continue
		}
		wait = minRedial
		d.mu.Lock()
		if d.srv == nil {
			d.srv = newServer(d.cfg, nil, d.reaper, d.env, d.log)
		}
		srv := d.srv
		d.mu.Unlock()
		srv.attach(conn)
		d.log.Debug("agent: connected", "socket", d.cfg.dial)
		serr := srv.serve(conn)
		_ = conn.Close()
		srv.detach()
		if serr != nil && !errors.Is(serr, net.ErrClosed) {
			d.log.Warn("agent: connection", "err", serr)
		}
		if !srv.drain(sessionDrain, true) {
			d.log.Warn("agent: commands of the old connection still running")
		}
		if ctx.Err() != nil {
			return nil
		}
		lost = time.Now()
	}
}
