package egressgate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"threadbox/domain/container"
	"threadbox/domain/egress"
	"threadbox/domain/org"
)

type fakeContainers map[string]container.Container

func (f fakeContainers) Container(_ context.Context, id string) (container.Container, error) {
	return f[id], nil
}

type fakePolicies struct {
	mu    sync.Mutex
	p     org.Policy
	reads int
}

func (f *fakePolicies) OrgPolicy(context.Context, string) (org.Policy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.p, nil
}

func TestGateKeepsPolicyForItsTTL(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := container.Restore("cnt_1", "thr_1", "org_1", "usr_1", "thr_1", container.Running, "docker", "", now, now)
	on := true
	pol, _ := org.DefaultPolicy().Patch(org.PolicyPatch{Egress: &on, EgressAllow: &[]string{"pypi.example"}})
	fp := &fakePolicies{p: pol}
	g := NewGate(fakeContainers{"cnt_1": c}, fp, 2*time.Second)
	g.now = func() time.Time { return now }
	scope, ep, err := g.EgressPolicy(context.Background(), "cnt_1")
	if err != nil || scope.OrgID != "org_1" || scope.UserID != "usr_1" || scope.ThreadID != "thr_1" || !ep.On || len(ep.Allow) != 1 {
		t.Fatalf("%+v %+v %v", scope, ep, err)
	}
	fp.mu.Lock()
	fp.p = org.DefaultPolicy()
	fp.mu.Unlock()
	now = now.Add(time.Second)
	if _, ep, _ := g.EgressPolicy(context.Background(), "cnt_1"); !ep.On || fp.reads != 1 {
		t.Fatalf("read again within the TTL: %d reads", fp.reads)
	}
	now = now.Add(1500 * time.Millisecond)
	if _, ep, _ := g.EgressPolicy(context.Background(), "cnt_1"); ep.On || fp.reads != 2 {
		t.Fatalf("the change is not seen after the TTL: %+v, %d reads", ep, fp.reads)
	}
}

type ledger struct {
	mu      sync.Mutex
	batches [][]egress.Record
}

func (l *ledger) AppendEgress(_ context.Context, recs []egress.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, append([]egress.Record(nil), recs...))
	return nil
}

// EgressRecords selects the records as the store does: each field of f
// that is set must equal the record's.
func (l *ledger) EgressRecords(_ context.Context, f egress.LedgerFilter) ([]egress.Record, error) {
	var out []egress.Record
	for _, r := range l.records() {
		if r.OrgID == f.OrgID && (f.ContainerID == "" || r.ContainerID == f.ContainerID) && (f.Host == "" || r.Host == f.Host) &&
			(f.Allowed == nil || r.Allowed == *f.Allowed) {
			out = append(out, r)
		}
	}
	return out, nil
}

type counter struct{ allowed, refused int }

func (c *counter) EgressConnection(allowed bool, _ string, _, _ int64) {
	if allowed {
		c.allowed++
	} else {
		c.refused++
	}
}

func TestLogWritesBatchesAndNamesRefusals(t *testing.T) {
	led, cnt := &ledger{}, &counter{}
	l := NewLog(led, cnt, nil)
	start := time.Now()
	l.Record(egress.Record{ContainerID: "cnt_1", Host: "pypi.example", Port: 443, Allowed: true, At: start})
	l.Record(egress.Record{ContainerID: "cnt_1", Host: "evil.example", Port: 443, Rule: egress.RuleNoMatch, Reason: "evil.example:443 is not in the organization's egress allowlist", At: start})
	l.Record(egress.Record{ContainerID: "cnt_1", Host: "evil.example", Port: 443, Rule: egress.RuleNoMatch, Reason: "again", At: start})
	l.Record(egress.Record{ContainerID: "cnt_2", Host: "meta.example", Port: 80, Rule: egress.RulePrivate, Reason: "private", At: start})
	l.Record(egress.Record{ContainerID: "cnt_1", Host: "old.example", Port: 80, Reason: "earlier", At: start.Add(-time.Minute)})
	if got := l.Refused("cnt_1", start); got != "Egress refused: evil.example:443 (evil.example:443 is not in the organization's egress allowlist)." {
		t.Fatalf("refused line %q", got)
	}
	if got := l.Refused("cnt_3", start); got != "" {
		t.Fatalf("a container with no refusal: %q", got)
	}
	l.Close()
	n := 0
	for _, b := range led.batches {
		for _, r := range b {
			if r.ID == "" {
				t.Fatal("record without an id")
			}
			n++
		}
	}
	if n != 5 || cnt.allowed != 1 || cnt.refused != 4 {
		t.Fatalf("%d records written, counted %+v", n, cnt)
	}
}

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// records returns what the ledger was given, in order.
func (l *ledger) records() []egress.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []egress.Record
	for _, b := range l.batches {
		out = append(out, b...)
	}
	return out
}

// TestLogBoundsEachSandboxsRefusals checks the per-container bucket of
// refusal records: a container refused past it has the rest counted into
// one record, written once its bucket holds a token again and at close,
// while another container's refusals are all written.
func TestLogBoundsEachSandboxsRefusals(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	led := &ledger{}
	l := newLog(led, nil, nil, clk.Now)
	refuse := func(cid, host string) {
		l.Record(egress.Record{OrgID: "org_1", UserID: "usr_1", ContainerID: cid, Host: host, Port: 443, Rule: egress.RuleNoMatch, Reason: "not listed", At: clk.Now()})
	}
	for i := range RefusalBurst + 10 {
		refuse("cnt_loud", fmt.Sprintf("h%d.example", i))
	}
	for range 3 {
		refuse("cnt_quiet", "evil.example")
	}
	if got := l.Refused("cnt_loud", clk.Now()); !strings.Contains(got, "h73.example:443") {
		t.Fatalf("a refusal held back is not named in the tool result: %q", got)
	}
	// summaries returns the reasons of cnt_loud's summary records.
	summaries := func() []string {
		var out []string
		for _, r := range led.records() {
			if r.Rule == RuleSuppressed && r.ContainerID == "cnt_loud" && r.OrgID == "org_1" && !r.Allowed && r.ID != "" {
				out = append(out, r.Reason)
			}
		}
		return out
	}
	clk.advance(time.Second / RefusalsPerSecond) // one token
	for deadline := time.Now().Add(10 * time.Second); len(summaries()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no summary once the bucket holds a token again")
		}
	}
	refuse("cnt_loud", "held.example") // the summary took the token
	l.Close()

	loud, quiet := 0, 0
	for _, r := range led.records() {
		switch {
		case r.Rule == RuleSuppressed:
		case r.ContainerID == "cnt_loud":
			loud++
		case r.ContainerID == "cnt_quiet":
			quiet++
		}
	}
	got := summaries()
	if loud != RefusalBurst || quiet != 3 || len(got) != 2 ||
		!strings.HasPrefix(got[0], "10 more refused connections") || !strings.Contains(got[0], "h73.example:443") ||
		!strings.HasPrefix(got[1], "1 more refused connections") || !strings.Contains(got[1], "held.example:443") {
		t.Fatalf("%d records of cnt_loud, %d of cnt_quiet, summaries %q", loud, quiet, got)
	}
	// A summary is found by the host of the last refusal it stands for,
	// which has no record of its own.
	for _, host := range []string{"h73.example", "held.example"} {
		recs, _ := led.EgressRecords(context.Background(), egress.LedgerFilter{OrgID: "org_1", Host: host})
		if len(recs) != 1 || recs[0].Rule != RuleSuppressed || recs[0].Port != 443 {
			t.Fatalf("the ledger's records of %s: %+v", host, recs)
		}
	}
}

type fakeSecrets struct{ reads int }

func (f *fakeSecrets) OrgEgressSecrets(_ context.Context, orgID string) ([]egress.Secret, error) {
	f.reads++
	s, err := egress.NewSecret(orgID, "api", []string{"api.example"}, "Authorization", "Bearer x", time.Now())
	return []egress.Secret{s}, err
}

func TestGateCarriesSecretsWhileEgressIsOn(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := container.Restore("cnt_1", "thr_1", "org_1", "usr_1", "thr_1", container.Running, "docker", "", now, now)
	fp := &fakePolicies{p: org.DefaultPolicy()}
	fs := &fakeSecrets{}
	g := NewGate(fakeContainers{"cnt_1": c}, fp, time.Second).WithSecrets(fs)
	g.now = func() time.Time { return now }
	if _, ep, err := g.EgressPolicy(context.Background(), "cnt_1"); err != nil || len(ep.Secrets) != 0 || fs.reads != 0 {
		t.Fatalf("secrets read while egress is off: %+v %v %d", ep, err, fs.reads)
	}
	on := true
	fp.p, _ = org.DefaultPolicy().Patch(org.PolicyPatch{Egress: &on, EgressAllow: &[]string{"api.example"}})
	now = now.Add(2 * time.Second)
	_, ep, err := g.EgressPolicy(context.Background(), "cnt_1")
	if err != nil || len(ep.Secrets) != 1 || ep.Secrets[0].Value != "Bearer x" || fs.reads != 1 {
		t.Fatalf("secrets not carried: %+v %v %d", ep, err, fs.reads)
	}
}
