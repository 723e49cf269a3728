// Package egressgate serves the egress proxy the policy in force for each
// sandbox and keeps what it reports: the org policy of a container, read
// per connection and kept a few seconds (a change reaches running
// sandboxes within that); the ledger of every connection, written in
// batches; and the connections a container was refused lately, which the
// command that made them shows in its tool result.
package egressgate

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/egress"
	"threadbox/domain/id"
	"threadbox/domain/org"
)

// Containers finds a container's record (infra/store.Containers).
type Containers interface {
	Container(ctx context.Context, id string) (container.Container, error)
}

// Policies reads an org's policy in force (app/admin.Service).
type Policies interface {
	OrgPolicy(ctx context.Context, orgID string) (org.Policy, error)
}

// Secrets returns an org's egress secrets with their values
// (app/admin.Service).
type Secrets interface {
	OrgEgressSecrets(ctx context.Context, orgID string) ([]egress.Secret, error)
}

// DefaultTTL is how long a container's policy is kept: a change made by
// an org admin reaches running sandboxes within it.
const DefaultTTL = 2 * time.Second

// Gate returns each container's egress policy, kept for TTL.
type Gate struct {
	containers Containers
	policies   Policies
	secrets    Secrets
	ttl        time.Duration
	now        func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	scope egress.Scope
	pol   egress.Policy
	at    time.Time
}

// NewGate returns a gate keeping policies for ttl (0 means DefaultTTL).
func NewGate(containers Containers, policies Policies, ttl time.Duration) *Gate {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Gate{containers: containers, policies: policies, ttl: ttl, now: time.Now, cache: map[string]cached{}}
}

// WithSecrets makes the policies the gate returns carry the org's
// secrets, read with the policy and kept as long.
func (g *Gate) WithSecrets(s Secrets) *Gate {
	g.secrets = s
	return g
}

// EgressPolicy returns the container's scope and its org's egress policy
// (with the org's secrets while egress is on).
func (g *Gate) EgressPolicy(ctx context.Context, containerID string) (egress.Scope, egress.Policy, error) {
	now := g.now()
	g.mu.Lock()
	c, ok := g.cache[containerID]
	g.mu.Unlock()
	if ok && now.Sub(c.at) < g.ttl {
		return c.scope, c.pol, nil
	}
	ct, err := g.containers.Container(ctx, containerID)
	if err != nil {
		return egress.Scope{}, egress.Policy{}, fmt.Errorf("egressgate: container: %w", err)
	}
	p, err := g.policies.OrgPolicy(ctx, ct.OrgID())
	if err != nil {
		return egress.Scope{}, egress.Policy{}, fmt.Errorf("egressgate: policy: %w", err)
	}
	pol := p.EgressPolicy()
	if pol.On && g.secrets != nil {
		if pol.Secrets, err = g.secrets.OrgEgressSecrets(ctx, ct.OrgID()); err != nil {
			return egress.Scope{}, egress.Policy{}, fmt.Errorf("egressgate: secrets: %w", err)
		}
	}
	c = cached{scope: egress.Scope{OrgID: ct.OrgID(), UserID: ct.OwnerID(), ThreadID: ct.ThreadID(), ContainerID: containerID}, pol: pol, at: now}
	g.mu.Lock()
	if len(g.cache) > 4096 {
		for k, v := range g.cache {
			if now.Sub(v.at) >= g.ttl {
				delete(g.cache, k)
			}
		}
	}
	g.cache[containerID] = c
	g.mu.Unlock()
	return c.scope, c.pol, nil
}

// Counter counts connections for the metrics (infra/metrics.Registry).
type Counter interface {
	EgressConnection(allowed bool, rule string, bytesUp, bytesDown int64)
}

// Log records the proxy's connections: to the ledger in batches, to the
// metrics, and to the list of each container's recent refusals.
type Log struct {
	ledger  egress.Ledger
	counter Counter
	log     *slog.Logger
	ch      chan egress.Record
	done    chan struct{}

	mu      sync.Mutex
	refused map[string][]egress.Record // by container, oldest first
}

// Defaults of the log's batches and of the refusals it keeps.
const (
	batchMax      = 256
	flushEvery    = 500 * time.Millisecond
	refusedKept   = 16
	refusedMaxAge = 10 * time.Minute
)

// NewLog returns a log writing to ledger; counter may be nil. Close
// writes what is left.
func NewLog(ledger egress.Ledger, counter Counter, log *slog.Logger) *Log {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Log{ledger: ledger, counter: counter, log: log, ch: make(chan egress.Record, 4096), done: make(chan struct{}), refused: map[string][]egress.Record{}}
	go l.run()
	return l
}

// Record takes one connection's record. It does not block: when the
// writer is that far behind, the record goes to the server log only.
func (l *Log) Record(r egress.Record) {
	if r.ID == "" {
		r.ID = id.New("egr")
	}
	if l.counter != nil {
		l.counter.EgressConnection(r.Allowed, r.Rule, r.BytesUp, r.BytesDown)
	}
	if !r.Allowed {
		l.mu.Lock()
		list := append(l.refused[r.ContainerID], r)
		if len(list) > refusedKept {
			list = list[len(list)-refusedKept:]
		}
		l.refused[r.ContainerID] = list
		l.mu.Unlock()
	}
	select {
	case l.ch <- r:
	default:
		l.log.Warn("egress: ledger writer behind; record dropped", "container", r.ContainerID, "host", r.Host, "allowed", r.Allowed, "rule", r.Rule)
	}
}

func (l *Log) run() {
	defer close(l.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	var batch []egress.Record
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := l.ledger.AppendEgress(ctx, batch); err != nil {
			l.log.Error("egress: ledger", "records", len(batch), "err", err)
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case r, ok := <-l.ch:
			if !ok {
				flush()
				return
			}
			if batch = append(batch, r); len(batch) >= batchMax {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Close writes the records taken and stops the writer.
func (l *Log) Close() {
	close(l.ch)
	<-l.done
}

// Refused returns one line naming the connections the container was
// refused since since (at most the last few), for the tool result of the
// command that made them; "" when none.
func (l *Log) Refused(containerID string, since time.Time) string {
	l.mu.Lock()
	list := l.refused[containerID]
	var keep, hits []egress.Record
	for _, r := range list {
		if time.Since(r.At) < refusedMaxAge {
			keep = append(keep, r)
		}
		if !r.At.Before(since) {
			hits = append(hits, r)
		}
	}
	if len(keep) == 0 {
		delete(l.refused, containerID)
	} else {
		l.refused[containerID] = keep
	}
	l.mu.Unlock()
	if len(hits) == 0 {
		return ""
	}
	seen := map[string]bool{}
	var parts []string
	for _, r := range hits {
		key := r.Host + ":" + strconv.Itoa(r.Port)
		if seen[key] {
			continue
		}
		seen[key] = true
		parts = append(parts, key+" ("+r.Reason+")")
	}
	return "Egress refused: " + strings.Join(parts, "; ") + "."
}
