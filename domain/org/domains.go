package org

import (
	"strings"

	"threadbox/domain/fault"
)

// EmailDomains says which org owns which email domains, as the operator
// set it (ORG_EMAIL_DOMAINS). An org admin may add users only at domains
// no other org owns: an admin of one org can then neither claim an
// address at another org's domain before its owner is added there, nor
// learn from the answer whether such an address has an account.
type EmailDomains struct {
	owner map[string]string // domain → org name
}

// NewEmailDomains returns the ownership of each domain (lower-cased, without
// a leading "@") by the org named; a domain also covers its subdomains.
func NewEmailDomains(owners map[string]string) (EmailDomains, error) {
	d := EmailDomains{owner: make(map[string]string, len(owners))}
	for dom, name := range owners {
		dom = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(dom), "@"))
		name = strings.TrimSpace(name)
		if !validDomain(dom) {
			return EmailDomains{}, fault.Errorf(fault.Invalid, "%q is not an email domain", dom)
		}
		if name == "" {
			return EmailDomains{}, fault.Errorf(fault.Invalid, "the email domain %s names no organization", dom)
		}
		if prev, ok := d.owner[dom]; ok && prev != name {
			return EmailDomains{}, fault.Errorf(fault.Invalid, "the email domain %s is given to two organizations", dom)
		}
		d.owner[dom] = name
	}
	return d, nil
}

// Owner returns the name of the org that owns email's domain (the
// longest owned domain that is the address's domain or a parent of it),
// and whether one does.
func (d EmailDomains) Owner(email string) (string, bool) {
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return "", false
	}
	dom := strings.ToLower(email[at+1:])
	for {
		if name, ok := d.owner[dom]; ok {
			return name, true
		}
		dot := strings.IndexByte(dom, '.')
		if dot < 0 {
			return "", false
		}
		dom = dom[dot+1:]
	}
}

// MayAdd returns nil when an admin of the org named orgName may add a user
// with email, or the refusal: the address is at a domain another org owns.
// The refusal does not depend on whether the address has an account.
func (d EmailDomains) MayAdd(orgName, email string) error {
	if owner, ok := d.Owner(email); ok && owner != orgName {
		return fault.New(fault.Forbidden, "addresses at this email domain are kept for another organization; the operator assigns email domains (ORG_EMAIL_DOMAINS)")
	}
	return nil
}

// validDomain reports whether dom looks like a DNS name with a dot: labels
// of letters, digits and hyphens.
func validDomain(dom string) bool {
	if len(dom) == 0 || len(dom) > 253 || !strings.Contains(dom, ".") {
		return false
	}
	for _, label := range strings.Split(dom, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
