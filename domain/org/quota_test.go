package org

import (
	"strings"
	"testing"

	"threadbox/domain/fault"
)

func TestPolicyQuotasPatch(t *testing.T) {
	def := DefaultPolicy()
	for _, q := range AllQuotas {
		if def.Quotas().Limit(q) != 0 {
			t.Errorf("default %s = %d, want 0 (unlimited)", q, def.Quotas().Limit(q))
		}
	}
	set, err := def.Patch(PolicyPatch{Quotas: map[Quota]int64{RunningSandboxesPerUser: 1, StorageBytesPerOrg: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		from    Policy
		patch   PolicyPatch
		want    map[Quota]int64 // every quota not named is 0
		wantErr string          // a fault.Invalid naming this, the policy unchanged
	}{
		{"no quotas leaves them", set, PolicyPatch{CodeExecution: ptr(false)}, map[Quota]int64{RunningSandboxesPerUser: 1, StorageBytesPerOrg: 1 << 30}, ""},
		{"each quota set", def, PolicyPatch{Quotas: map[Quota]int64{RunningSandboxesPerUser: 1, RunningSandboxesPerOrg: 2, ContainersPerUser: 3, StorageBytesPerOrg: 4}},
			map[Quota]int64{RunningSandboxesPerUser: 1, RunningSandboxesPerOrg: 2, ContainersPerUser: 3, StorageBytesPerOrg: 4}, ""},
		{"one quota changed, the others kept", set, PolicyPatch{Quotas: map[Quota]int64{ContainersPerUser: 5}}, map[Quota]int64{RunningSandboxesPerUser: 1, ContainersPerUser: 5, StorageBytesPerOrg: 1 << 30}, ""},
		{"zero makes one unlimited again", set, PolicyPatch{Quotas: map[Quota]int64{RunningSandboxesPerUser: 0}}, map[Quota]int64{StorageBytesPerOrg: 1 << 30}, ""},
		{"negative refused, nothing applied", set, PolicyPatch{CodeExecution: ptr(false), Quotas: map[Quota]int64{ContainersPerUser: 2, StorageBytesPerOrg: -1}}, nil, "quotas.storageBytesPerOrg must be 0 (unlimited) or a positive number"},
		{"negative running quota refused", def, PolicyPatch{Quotas: map[Quota]int64{RunningSandboxesPerOrg: -3}}, nil, "quotas.runningSandboxesPerOrg"},
		{"unknown quota refused", def, PolicyPatch{Quotas: map[Quota]int64{"gpus": 1}}, nil, `unknown quota "gpus"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.from.Patch(tc.patch)
			if tc.wantErr != "" {
				if !fault.Is(err, fault.Invalid) || !strings.Contains(fault.MessageOf(err), tc.wantErr) || got != tc.from {
					t.Fatalf("want invalid %q and the policy unchanged, got %v %+v", tc.wantErr, err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range AllQuotas {
				if got.Quotas().Limit(q) != tc.want[q] {
					t.Errorf("%s = %d, want %d", q, got.Quotas().Limit(q), tc.want[q])
				}
			}
		})
	}
	if _, err := NewQuotas(map[Quota]int64{ContainersPerUser: -1}); !fault.Is(err, fault.Invalid) {
		t.Fatalf("NewQuotas with a negative limit: %v", err)
	}
	if q, err := NewQuotas(map[Quota]int64{ContainersPerUser: 7}); err != nil || q.Limit(ContainersPerUser) != 7 || q.Limit(StorageBytesPerOrg) != 0 {
		t.Fatalf("NewQuotas: %+v %v", q, err)
	}
}

func TestQuotasAdmit(t *testing.T) {
	q, err := NewQuotas(map[Quota]int64{RunningSandboxesPerUser: 1, RunningSandboxesPerOrg: 3, ContainersPerUser: 2})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		quota    Quota
		used     int64
		kind     fault.Kind // "" means admitted
		contains string
	}{
		{RunningSandboxesPerUser, 0, "", ""},
		{RunningSandboxesPerUser, 1, fault.RateLimited, `quota "runningSandboxesPerUser" reached: your organization allows 1 running sandbox per user`},
		{RunningSandboxesPerUser, 4, fault.RateLimited, "you have 4 running"},
		{RunningSandboxesPerOrg, 2, "", ""},
		{RunningSandboxesPerOrg, 3, fault.RateLimited, `quota "runningSandboxesPerOrg" reached: your organization allows 3 running sandboxes and 3 are running`},
		{ContainersPerUser, 1, "", ""},
		{ContainersPerUser, 2, fault.Forbidden, `quota "containersPerUser" reached: your organization allows 2 containers per user and you have 2`},
		{StorageBytesPerOrg, 1 << 40, "", ""}, // unlimited here
	}
	for _, tc := range cases {
		err := q.Admit(tc.quota, tc.used)
		if tc.kind == "" {
			if err != nil {
				t.Errorf("%s with %d used: %v", tc.quota, tc.used, err)
			}
			continue
		}
		if !fault.Is(err, tc.kind) || !strings.Contains(fault.MessageOf(err), tc.contains) {
			t.Errorf("%s with %d used: got %v, want %s containing %q", tc.quota, tc.used, err, tc.kind, tc.contains)
		}
	}
	if err := (Quotas{}).Admit(ContainersPerUser, 1e6); err != nil {
		t.Errorf("no quota refused: %v", err)
	}
}

func TestQuotasStorage(t *testing.T) {
	limited, _ := NewQuotas(map[Quota]int64{StorageBytesPerOrg: 1000})
	cases := []struct {
		name     string
		q        Quotas
		used, n  int64
		left     int64
		contains string // "" means admitted
	}{
		{"unlimited", Quotas{}, 1 << 50, 1 << 40, -1, ""},
		{"fits", limited, 400, 600, 600, ""},
		{"fits exactly", limited, 0, 1000, 1000, ""},
		{"one byte too many", limited, 400, 601, 600, `quota "storageBytesPerOrg" exceeded: your organization may store 1000 bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), 400 are in use and 601 more bytes do not fit in the 600 left`},
		{"full, nothing added", limited, 1000, 0, 0, ""},
		{"past it", limited, 1200, 0, 0, "1200 are in use and nothing more fits"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.q.BytesLeft(tc.used); got != tc.left {
				t.Errorf("left %d, want %d", got, tc.left)
			}
			err := tc.q.AdmitBytes(tc.used, tc.n)
			if tc.contains == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !fault.Is(err, fault.TooLarge) || !strings.Contains(fault.MessageOf(err), tc.contains) {
				t.Fatalf("got %v, want too large containing %q", err, tc.contains)
			}
		})
	}
	if err := StorageExceeded(1000, 600, 0); !fault.Is(err, fault.TooLarge) || !strings.Contains(fault.MessageOf(err), "the upload is larger than the 400 bytes left") {
		t.Fatalf("upload refusal: %v", err)
	}
}
