package egressgate

import (
	"context"
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

func (l *ledger) EgressRecords(context.Context, egress.LedgerFilter) ([]egress.Record, error) {
	return nil, nil
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
