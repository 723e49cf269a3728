// Package egressgate serves the egress proxy the policy in force for each
// sandbox and keeps what it reports: the org policy of a container, read
// per connection and kept a few seconds (a change reaches running
// sandboxes within that); the ledger of every connection, written in
// batches, each container's refusals under a token bucket; and the
// connections a container was refused lately, which the command that
// made them shows in its tool result.
package egressgate

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

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
	now     func() time.Time

	mu      sync.Mutex
	refused map[string][]egress.Record // by container, oldest first
	buckets map[string]*refusalBucket  // by container
}

// Defaults of the log's batches and of the refusals it keeps.
const (
	batchMax      = 256
	flushEvery    = 500 * time.Millisecond
	refusedKept   = 16
	refusedMaxAge = 10 * time.Minute
)

// A container's refusals reach the ledger one record each at most
// RefusalBurst at once and RefusalsPerSecond a second after that (a token
// bucket per container), so that a sandbox looping on a refused host
// cannot fill the writer's queue and crowd out other sandboxes' records.
// The refusals past the bucket are counted, still named in the tool
// result and counted in the metrics, and written as one RuleSuppressed
// record once the bucket holds a token again (or when the log closes).
const (
	RefusalBurst      = 64
	RefusalsPerSecond = 8
)

// RuleSuppressed is the rule of the record that stands for a container's
// refusals not written one by one. It carries the host and port of the
// last of them, so the ledger's host filter finds it, and their number in
// its reason.
const RuleSuppressed = "refusals-suppressed"

// refusalBucket is a container's token bucket of refusal records and the
// refusals it held back since the last summary.
type refusalBucket struct {
	lim        *rate.Limiter
	suppressed int
	last       egress.Record // the latest refusal held back
}

// NewLog returns a log writing to ledger; counter may be nil. Close
// writes what is left.
func NewLog(ledger egress.Ledger, counter Counter, log *slog.Logger) *Log {
	return newLog(ledger, counter, log, time.Now)
}

func newLog(ledger egress.Ledger, counter Counter, log *slog.Logger, now func() time.Time) *Log {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Log{ledger: ledger, counter: counter, log: log, ch: make(chan egress.Record, 4096), done: make(chan struct{}), now: now,
		refused: map[string][]egress.Record{}, buckets: map[string]*refusalBucket{}}
	go l.run()
	return l
}

// Record takes one connection's record. It does not block: when the
// writer is that far behind, the record goes to the server log only. A
// refusal past its container's bucket is counted instead of queued.
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
		admitted := l.admitLocked(r)
		l.mu.Unlock()
		if !admitted {
			return
		}
	}
	select {
	case l.ch <- r:
	default:
		l.log.Warn("egress: ledger writer behind; record dropped", "container", r.ContainerID, "host", r.Host, "allowed", r.Allowed, "rule", r.Rule)
	}
}

// admitLocked takes a token of r's container for the refusal r, or
// counts r as held back when there is none.
func (l *Log) admitLocked(r egress.Record) bool {
	b := l.buckets[r.ContainerID]
	if b == nil {
		b = &refusalBucket{lim: rate.NewLimiter(RefusalsPerSecond, RefusalBurst)}
		l.buckets[r.ContainerID] = b
	}
	if b.lim.AllowN(l.now(), 1) {
		return true
	}
	b.suppressed++
	b.last = r
	return false
}

// suppressedRecords returns one record for each container whose held-back
// refusals may be written now: those whose bucket holds a token again, or
// every one when all is set. It forgets the buckets that are full again.
func (l *Log) suppressedRecords(all bool) []egress.Record {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []egress.Record
	for cid, b := range l.buckets {
		if b.suppressed > 0 && (all || b.lim.AllowN(now, 1)) {
			last := b.last
			out = append(out, egress.Record{ID: id.New("egr"), OrgID: last.OrgID, UserID: last.UserID, ThreadID: last.ThreadID, ContainerID: cid,
				Host: last.Host, Port: last.Port, Rule: RuleSuppressed, At: now.UTC(),
				Reason: fmt.Sprintf("%d more refused connections of this sandbox, over %d a second, not recorded one by one; the last to %s",
					b.suppressed, RefusalsPerSecond, net.JoinHostPort(last.Host, strconv.Itoa(last.Port)))})
			b.suppressed, b.last = 0, egress.Record{}
		}
		if b.suppressed == 0 && b.lim.TokensAt(now) >= RefusalBurst {
			delete(l.buckets, cid)
		}
	}
	return out
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
				batch = append(batch, l.suppressedRecords(true)...)
				flush()
				return
			}
			if batch = append(batch, r); len(batch) >= batchMax {
				flush()
			}
		case <-tick.C:
			batch = append(batch, l.suppressedRecords(false)...)
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
