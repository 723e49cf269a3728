package org

import (
	"testing"

	"threadbox/domain/fault"
)

func quotas(t *testing.T, m map[Quota]int64) Quotas {
	t.Helper()
	q, err := NewQuotas(m)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestBoundsApply(t *testing.T) {
	cases := []struct {
		name               string
		defaults, ceilings map[Quota]int64
		org, want          map[Quota]int64
	}{
		{"no bounds: the org's own", nil, nil, map[Quota]int64{ContainersPerUser: 3}, map[Quota]int64{ContainersPerUser: 3}},
		{"no bounds: unset is unlimited", nil, nil, nil, nil},
		{"unset takes the default", map[Quota]int64{RunningSandboxesPerUser: 2}, nil, nil, map[Quota]int64{RunningSandboxesPerUser: 2}},
		{"set beats the default, either way", map[Quota]int64{RunningSandboxesPerUser: 2, ContainersPerUser: 5}, nil,
			map[Quota]int64{RunningSandboxesPerUser: 1, ContainersPerUser: 9}, map[Quota]int64{RunningSandboxesPerUser: 1, ContainersPerUser: 9}},
		{"a ceiling without a default is the default", nil, map[Quota]int64{StorageBytesPerOrg: 1000}, nil, map[Quota]int64{StorageBytesPerOrg: 1000}},
		{"below the ceiling stays", map[Quota]int64{StorageBytesPerOrg: 500}, map[Quota]int64{StorageBytesPerOrg: 1000},
			map[Quota]int64{StorageBytesPerOrg: 700}, map[Quota]int64{StorageBytesPerOrg: 700}},
		{"a value from before the ceiling is capped", nil, map[Quota]int64{RunningSandboxesPerOrg: 4},
			map[Quota]int64{RunningSandboxesPerOrg: 40}, map[Quota]int64{RunningSandboxesPerOrg: 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBounds(quotas(t, tc.defaults), quotas(t, tc.ceilings))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := b.Apply(quotas(t, tc.org)), quotas(t, tc.want); got != want {
				t.Fatalf("in force %+v, want %+v", got, want)
			}
		})
	}
}

func TestBoundsCheck(t *testing.T) {
	b, err := NewBounds(quotas(t, map[Quota]int64{ContainersPerUser: 5}), quotas(t, map[Quota]int64{ContainersPerUser: 10, StorageBytesPerOrg: 1 << 30}))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		org  map[Quota]int64
		msg  string
	}{
		{"unset", nil, ""},
		{"at the ceiling", map[Quota]int64{ContainersPerUser: 10}, ""},
		{"lowered", map[Quota]int64{ContainersPerUser: 1, StorageBytesPerOrg: 1}, ""},
		{"no ceiling on that quota", map[Quota]int64{RunningSandboxesPerUser: 1000}, ""},
		{"above the ceiling", map[Quota]int64{ContainersPerUser: 11},
			"quotas.containersPerUser may be at most 10 on this server (its operator's ceiling); 0 or null restores the server's default, 5"},
		{"above a ceiling without a default", map[Quota]int64{StorageBytesPerOrg: 1<<30 + 1},
			"quotas.storageBytesPerOrg may be at most 1073741824 on this server (its operator's ceiling); 0 or null restores the server's default, 1073741824"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := b.Check(quotas(t, tc.org))
			if tc.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !fault.Is(err, fault.Invalid) || fault.MessageOf(err) != tc.msg {
				t.Fatalf("got %v, want %q", err, tc.msg)
			}
		})
	}
	if _, err := NewBounds(quotas(t, map[Quota]int64{ContainersPerUser: 11}), quotas(t, map[Quota]int64{ContainersPerUser: 10})); !fault.Is(err, fault.Invalid) {
		t.Fatalf("a default above its ceiling: %v", err)
	}
}
