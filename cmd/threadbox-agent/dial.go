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
const (
	minRedial = 5 * time.Millisecond
	maxRedial = 250 * time.Millisecond
	// sessionDrain bounds the wait for the commands of an ended connection
	// to exit before the next connection is served.
	sessionDrain = 2 * time.Second
)

// dialer serves the protocol on connections it makes to the host's unix
// socket, one at a time, each with a fresh server: a command never outlives
// the connection that started it, so a new host never sees frames meant for
// an old one.
type dialer struct {
	cfg    config
	reaper *reaper
	env    []string
	log    *slog.Logger

	mu  sync.Mutex
	srv *server
}

// current returns the server of the connection being served, or nil.
func (d *dialer) current() *server {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.srv
}

// loop dials, serves and dials again until ctx ends.
func (d *dialer) loop(ctx context.Context) error {
	wait := minRedial
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
			wait = min(2*wait, maxRedial)
			continue
		}
		wait = minRedial
		srv := newServer(d.cfg, conn, d.reaper, d.env, d.log)
		d.mu.Lock()
		d.srv = srv
		d.mu.Unlock()
		d.log.Debug("agent: connected", "socket", d.cfg.dial)
		serr := srv.serve(conn)
		_ = conn.Close()
		d.mu.Lock()
		d.srv = nil
		d.mu.Unlock()
		if serr != nil && !errors.Is(serr, net.ErrClosed) {
			d.log.Warn("agent: connection", "err", serr)
		}
		// Nobody is left to read the results of what was running.
		srv.killAll()
		if !srv.drain(sessionDrain) {
			d.log.Warn("agent: commands of the old connection still running")
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}
