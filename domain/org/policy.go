package org

import (
	"slices"
	"strings"

	"threadbox/domain/egress"
	"threadbox/domain/fault"
)

// Feature names one switch of the policy.
type Feature string

// The features an org admin can switch.
const (
	CodeExecution      Feature = "codeExecution"
	Uploads            Feature = "uploads"
	DownloadsGenerated Feature = "downloads.generated"
	DownloadsUploaded  Feature = "downloads.uploaded"
	// ContentCredentials signs generated media on download with a C2PA
	// manifest (docs/content-credentials.md).
	ContentCredentials Feature = "contentCredentials"
	// Egress opens the sandbox's outbound network through the egress proxy
	// to the hosts of the org's allowlist (docs/egress.md); off by default.
	Egress Feature = "egress"
)

// DefaultMaxUploadBytes is the default upload size cap (100 MiB).
const DefaultMaxUploadBytes int64 = 100 << 20

// Policy is the org's feature policy, a value object: the feature switches,
// the upload cap and the resource quotas.
type Policy struct {
	codeExecution      bool
	uploads            bool
	maxUploadBytes     int64
	downloadsGenerated bool
	downloadsUploaded  bool
	// unsignedDownloads is contentCredentials off: the zero policy signs,
	// as the default does.
	unsignedDownloads bool
	egress            bool
	// egressAllow is the allowlist's patterns, canonical and one a line,
	// which keeps a policy a comparable value.
	egressAllow string
	quotas      Quotas
}

// DefaultPolicy has every feature on and no quota.
func DefaultPolicy() Policy {
	return Policy{codeExecution: true, uploads: true, maxUploadBytes: DefaultMaxUploadBytes, downloadsGenerated: true, downloadsUploaded: true}
}

// NewPolicy builds a policy, refusing a non-positive upload cap.
func NewPolicy(codeExecution, uploads bool, maxUploadBytes int64, downloadsGenerated, downloadsUploaded bool) (Policy, error) {
	if maxUploadBytes <= 0 {
		return Policy{}, fault.New(fault.Invalid, "uploads.maxBytes must be a positive number of bytes")
	}
	return Policy{codeExecution: codeExecution, uploads: uploads, maxUploadBytes: maxUploadBytes,
		downloadsGenerated: downloadsGenerated, downloadsUploaded: downloadsUploaded}, nil
}

// WithQuotas returns the policy with quotas q.
func (p Policy) WithQuotas(q Quotas) Policy { p.quotas = q; return p }

// WithContentCredentials returns the policy with contentCredentials on or
// off.
func (p Policy) WithContentCredentials(on bool) Policy { p.unsignedDownloads = !on; return p }

// WithEgress returns the policy with egress on or off and its allowlist.
func (p Policy) WithEgress(on bool, allow []egress.Pattern) Policy {
	p.egress, p.egressAllow = on, joinPatterns(allow)
	return p
}

func joinPatterns(allow []egress.Pattern) string {
	s := make([]string, len(allow))
	for i, a := range allow {
		s[i] = a.String()
	}
	return strings.Join(s, "\n")
}

// EgressAllow returns the org's egress allowlist as written (kept while
// egress is off, so switching it on again restores it).
func (p Policy) EgressAllow() []string {
	if p.egressAllow == "" {
		return []string{}
	}
	return strings.Split(p.egressAllow, "\n")
}

// EgressPolicy returns the org's part of the egress decision. The
// allowlist was checked when it was set; a pattern that no longer parses
// (a row edited by hand) is left out.
func (p Policy) EgressPolicy() egress.Policy {
	out := egress.Policy{On: p.egress}
	for _, s := range p.EgressAllow() {
		if a, err := egress.ParsePattern(s); err == nil {
			out.Allow = append(out.Allow, a)
		}
	}
	return out
}

// Quotas returns the policy's resource quotas.
func (p Policy) Quotas() Quotas { return p.quotas }

// Allows reports whether feature f is on.
func (p Policy) Allows(f Feature) bool {
	switch f {
	case CodeExecution:
		return p.codeExecution
	case Uploads:
		return p.uploads
	case DownloadsGenerated:
		return p.downloadsGenerated
	case DownloadsUploaded:
		return p.downloadsUploaded
	case ContentCredentials:
		return !p.unsignedDownloads
	case Egress:
		return p.egress
	}
	return false
}

// MaxUploadBytes returns the upload size cap.
func (p Policy) MaxUploadBytes() int64 { return p.maxUploadBytes }

// PolicyPatch is a partial policy: nil fields are left as they are (a JSON
// merge patch decoded by the edge).
type PolicyPatch struct {
	CodeExecution      *bool
	Uploads            *bool
	MaxUploadBytes     *int64
	DownloadsGenerated *bool
	DownloadsUploaded  *bool
	ContentCredentials *bool
	Egress             *bool
	// EgressAllow, when not nil, replaces the egress allowlist; each entry
	// is a host pattern (egress.ParsePattern).
	EgressAllow *[]string
	// Quotas sets the named quotas (0 is unlimited, which is also what a
	// merge patch's null restores); quotas not named are left as they are.
	Quotas map[Quota]int64
}

// Patch returns the policy with the patch applied, or the policy unchanged
// and a fault.Invalid when any part of the patch is refused.
func (p Policy) Patch(pp PolicyPatch) (Policy, error) {
	n := p
	if pp.CodeExecution != nil {
		n.codeExecution = *pp.CodeExecution
	}
	if pp.Uploads != nil {
		n.uploads = *pp.Uploads
	}
	if pp.MaxUploadBytes != nil {
		if *pp.MaxUploadBytes <= 0 {
			return p, fault.New(fault.Invalid, "uploads.maxBytes must be a positive number of bytes")
		}
		n.maxUploadBytes = *pp.MaxUploadBytes
	}
	if pp.DownloadsGenerated != nil {
		n.downloadsGenerated = *pp.DownloadsGenerated
	}
	if pp.DownloadsUploaded != nil {
		n.downloadsUploaded = *pp.DownloadsUploaded
	}
	if pp.ContentCredentials != nil {
		n.unsignedDownloads = !*pp.ContentCredentials
	}
	if pp.Egress != nil {
		n.egress = *pp.Egress
	}
	if pp.EgressAllow != nil {
		allow, err := egress.ParsePatterns(*pp.EgressAllow)
		if err != nil {
			return p, err
		}
		n.egressAllow = joinPatterns(allow)
	}
	for _, name := range AllQuotas {
		if v, ok := pp.Quotas[name]; ok {
			if err := n.quotas.set(name, v); err != nil {
				return p, err
			}
		}
	}
	for name := range pp.Quotas {
		if !slices.Contains(AllQuotas, name) {
			return p, fault.Errorf(fault.Invalid, "unknown quota %q", string(name))
		}
	}
	return n, nil
}

// Refusal returns the Forbidden error for a refused feature, naming it.
func Refusal(f Feature) error {
	return fault.Errorf(fault.Forbidden, "feature %q is disabled by your organization's policy", string(f))
}
