package org

import (
	"testing"

	"threadbox/domain/fault"
)

func ptr[T any](v T) *T { return &v }

func TestPolicyAllowsAndPatch(t *testing.T) {
	def := DefaultPolicy()
	for _, f := range []Feature{CodeExecution, Uploads, DownloadsGenerated, DownloadsUploaded, ContentCredentials} {
		if !def.Allows(f) {
			t.Errorf("default policy refuses %s", f)
		}
	}
	if def.Allows("teleport") {
		t.Error("unknown feature allowed")
	}
	cases := []struct {
		name    string
		patch   PolicyPatch
		off     []Feature
		max     int64
		wantErr bool
	}{
		{"empty patch changes nothing", PolicyPatch{}, nil, DefaultMaxUploadBytes, false},
		{"code execution off", PolicyPatch{CodeExecution: ptr(false)}, []Feature{CodeExecution}, DefaultMaxUploadBytes, false},
		{"downloads off", PolicyPatch{DownloadsGenerated: ptr(false), DownloadsUploaded: ptr(false)}, []Feature{DownloadsGenerated, DownloadsUploaded}, DefaultMaxUploadBytes, false},
		{"content credentials off", PolicyPatch{ContentCredentials: ptr(false)}, []Feature{ContentCredentials}, DefaultMaxUploadBytes, false},
		{"uploads off with a cap", PolicyPatch{Uploads: ptr(false), MaxUploadBytes: ptr(int64(10))}, []Feature{Uploads}, 10, false},
		{"zero cap refused", PolicyPatch{MaxUploadBytes: ptr(int64(0))}, nil, DefaultMaxUploadBytes, true},
		{"negative cap refused, nothing else applied", PolicyPatch{CodeExecution: ptr(false), MaxUploadBytes: ptr(int64(-5))}, nil, DefaultMaxUploadBytes, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := def.Patch(tc.patch)
			if tc.wantErr {
				if !fault.Is(err, fault.Invalid) || got != def {
					t.Fatalf("want invalid and the policy unchanged, got %v %+v", err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			off := map[Feature]bool{}
			for _, f := range tc.off {
				off[f] = true
			}
			for _, f := range []Feature{CodeExecution, Uploads, DownloadsGenerated, DownloadsUploaded, ContentCredentials} {
				if got.Allows(f) == off[f] {
					t.Errorf("%s: allows=%v", f, got.Allows(f))
				}
			}
			if got.MaxUploadBytes() != tc.max {
				t.Errorf("max=%d want %d", got.MaxUploadBytes(), tc.max)
			}
		})
	}
	if err := Refusal(DownloadsGenerated); !fault.Is(err, fault.Forbidden) || fault.MessageOf(err) != `feature "downloads.generated" is disabled by your organization's policy` {
		t.Fatalf("refusal: %v", err)
	}
}

func TestPolicyEgress(t *testing.T) {
	def := DefaultPolicy()
	if def.Allows(Egress) || def.EgressPolicy().On || len(def.EgressAllow()) != 0 {
		t.Fatalf("egress is on by default: %+v", def.EgressPolicy())
	}
	got, err := def.Patch(PolicyPatch{Egress: ptr(true), EgressAllow: &[]string{"PyPI.example", "*.git.example:443", "pypi.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Allows(Egress) {
		t.Fatal("egress not on after the patch")
	}
	if a := got.EgressAllow(); len(a) != 2 || a[0] != "pypi.example" || a[1] != "*.git.example:443" {
		t.Fatalf("allowlist %q, want the two patterns canonical and once each", a)
	}
	if ep := got.EgressPolicy(); !ep.On || len(ep.Allow) != 2 || !ep.Allow[1].Matches("a.git.example", 443) || ep.Allow[1].Matches("a.git.example", 80) {
		t.Fatalf("egress policy %+v", ep)
	}
	off, err := got.Patch(PolicyPatch{Egress: ptr(false)})
	if err != nil || off.Allows(Egress) || len(off.EgressAllow()) != 2 {
		t.Fatalf("switching egress off keeps the allowlist: %v %q", err, off.EgressAllow())
	}
	bad, err := got.Patch(PolicyPatch{Egress: ptr(false), EgressAllow: &[]string{"ok.example", "*.com"}})
	if !fault.Is(err, fault.Invalid) || bad != got {
		t.Fatalf("a bad pattern must refuse the whole patch: %v", err)
	}
	cleared, err := got.Patch(PolicyPatch{EgressAllow: &[]string{}})
	if err != nil || len(cleared.EgressAllow()) != 0 || !cleared.Allows(Egress) {
		t.Fatalf("clearing the allowlist: %v %q", err, cleared.EgressAllow())
	}
}
