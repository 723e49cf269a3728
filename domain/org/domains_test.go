package org

import (
	"testing"

	"threadbox/domain/fault"
)

func TestEmailDomains(t *testing.T) {
	d, err := NewEmailDomains(map[string]string{"acme.test": "acme", "@Globex.TEST": "globex", "labs.acme.test": "acme labs"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		org, email string
		refused    bool
	}{
		{"acme", "bob@acme.test", false},
		{"acme", "bob@eng.acme.test", false},
		{"acme", "bob@labs.acme.test", true}, // the longer domain is another org's
		{"acme labs", "bob@labs.acme.test", false},
		{"acme labs", "bob@x.labs.acme.test", false},
		{"acme", "bob@globex.test", true},
		{"acme", "bob@GLOBEX.test", true},
		{"acme", "bob@sub.globex.test", true},
		{"acme", "bob@notglobex.test", false},
		{"acme", "bob@gmail.test", false}, // no owner: any org
		{"globex", "bob@gmail.test", false},
		{"", "bob@acme.test", true},
	}
	for _, tt := range tests {
		err := d.MayAdd(tt.org, tt.email)
		if (err != nil) != tt.refused {
			t.Errorf("%s adding %s: %v, want refused %v", tt.org, tt.email, err, tt.refused)
		}
		if err != nil && !fault.Is(err, fault.Forbidden) {
			t.Errorf("%s adding %s: %v, want forbidden", tt.org, tt.email, err)
		}
	}
	var none EmailDomains
	if err := none.MayAdd("acme", "bob@globex.test"); err != nil {
		t.Errorf("no domains assigned: %v", err)
	}
}

func TestNewEmailDomainsRefuses(t *testing.T) {
	for name, owners := range map[string]map[string]string{
		"no dot":         {"localhost": "acme"},
		"empty label":    {"acme..test": "acme"},
		"bad character":  {"ac_me.test": "acme"},
		"leading hyphen": {"-acme.test": "acme"},
		"no org":         {"acme.test": " "},
		"two orgs":       {"acme.test": "acme", "ACME.test": "globex"},
	} {
		if _, err := NewEmailDomains(owners); !fault.Is(err, fault.Invalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}
