package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// tokenRevoked is the PostgreSQL notification channel on which a server
// tells the others of a token it revoked.
const tokenRevoked = "threadbox_token_revoked"

// Notices carries what the servers on one database tell each other: the
// leases they want (Leases.WantLease) and the tokens they revoked
// (TokenRevoked). On PostgreSQL these are notifications, heard by every
// server that listens, the sender included. On the embedded SQLite, which
// one process uses alone, a revoked token is told to the watchers of the
// same Store and a wanted lease to nobody.
type Notices struct{ *handle }

// Notices returns the notices the servers on the database send each other.
func (s *Store) Notices() Notices { return Notices{s.handle} }

// Handlers are what Watch calls; a nil one is left out.
type Handlers struct {
	// WantedLease gets the name of a lease a server asks for.
	WantedLease func(name string)
	// RevokedToken gets the id of a token a server revoked.
	RevokedToken func(id string)
	// Listening is called each time Watch starts listening: at first, and
	// again after the database came back. What was told while nothing
	// listened is lost, so this is where a server looks for what it may
	// have missed.
	Listening func()
}

// TokenRevoked tells every server on the database that the token id was
// revoked.
func (s Notices) TokenRevoked(ctx context.Context, id string) error {
	if s.dialect != "postgres" {
		s.local.tell(id)
		return nil
	}
	if _, err := s.sqlDB.ExecContext(ctx, "SELECT pg_notify($1, $2)", tokenRevoked, id); err != nil {
		return dbError("announce revoked token", err)
	}
	return nil
}

// Watch calls h's handlers with what the servers on the database tell
// each other, this one included, until ctx ends. On PostgreSQL it listens
// on one connection of its own and listens again after the database comes
// back.
func (s Notices) Watch(ctx context.Context, h Handlers) {
	if s.dialect != "postgres" {
		if h.RevokedToken != nil {
			defer s.local.add(h.RevokedToken)()
		}
		if h.Listening != nil {
			h.Listening()
		}
		<-ctx.Done()
		return
	}
	fns := map[string]func(string){}
	if h.WantedLease != nil {
		fns[leaseWanted] = h.WantedLease
	}
	if h.RevokedToken != nil {
		fns[tokenRevoked] = h.RevokedToken
	}
	for ctx.Err() == nil {
		err := s.listen(ctx, fns, h.Listening)
		if ctx.Err() != nil {
			return
		}
		_ = err // the database went away: listen again shortly
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// listen listens on the channels of fns on a connection of its own, calls
// listening once it does, then hands each notification to its channel's
// function until ctx ends or the connection breaks.
func (s Notices) listen(ctx context.Context, fns map[string]func(string), listening func()) error {
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("store: listen: driver connection is %T", dc)
		}
		pc := sc.Conn()
		for channel := range fns {
			if _, err := pc.Exec(ctx, "LISTEN "+channel); err != nil {
				return driver.ErrBadConn
			}
		}
		if listening != nil {
			listening()
		}
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				// Interrupted or broken: the connection never goes
				// back to the pool (it still listens).
				return driver.ErrBadConn
			}
			if fn := fns[n.Channel]; fn != nil {
				fn(n.Payload)
			}
		}
	})
}

// localNotices hands the tokens revoked through one SQLite Store to the
// watchers of that Store.
type localNotices struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(id string)
}

// add makes fn hear every revoked token until the returned function is
// called.
func (l *localNotices) add(fn func(id string)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fns == nil {
		l.fns = map[int]func(string){}
	}
	key := l.next
	l.next++
	l.fns[key] = fn
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fns, key)
	}
}

func (l *localNotices) tell(id string) {
	l.mu.Lock()
	fns := make([]func(string), 0, len(l.fns))
	for _, fn := range l.fns {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}
