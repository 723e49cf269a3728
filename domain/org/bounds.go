package org

import "threadbox/domain/fault"

// Bounds are the server operator's defaults and ceilings of the quotas,
// a value object. An org's quota left at 0 takes the default; a ceiling
// caps every org's quota, and an org admin may set a quota only from 1 up
// to its ceiling (0 or null restores the default), so an admin can only
// lower what the operator allows. A default or ceiling of 0 means none.
type Bounds struct {
	defaults Quotas
	ceilings Quotas
}

// NewBounds builds the bounds, refusing (fault.Invalid) a default above
// its quota's ceiling. A quota with a ceiling and no default defaults to
// its ceiling: an org that sets nothing is never unlimited past it.
func NewBounds(defaults, ceilings Quotas) (Bounds, error) {
	for _, name := range AllQuotas {
		d, c := defaults.Limit(name), ceilings.Limit(name)
		if c > 0 && d > c {
			return Bounds{}, fault.Errorf(fault.Invalid, "the default of quota %q (%d) is above its ceiling (%d)", string(name), d, c)
		}
		if c > 0 && d == 0 {
			_ = defaults.set(name, c)
		}
	}
	return Bounds{defaults: defaults, ceilings: ceilings}, nil
}

// Apply returns the quotas in force for an org whose own quotas are q:
// each one the org set stays, one it left at 0 is the default, and a
// ceiling caps both (an org quota set before its ceiling existed counts
// as the ceiling).
func (b Bounds) Apply(q Quotas) Quotas {
	for _, name := range AllQuotas {
		v := q.Limit(name)
		if v == 0 {
			v = b.defaults.Limit(name)
		}
		if c := b.ceilings.Limit(name); c > 0 && (v == 0 || v > c) {
			v = c
		}
		_ = q.set(name, v)
	}
	return q
}

// Check refuses (fault.Invalid, naming the quota and its ceiling) quotas
// an org admin sets above a ceiling.
func (b Bounds) Check(q Quotas) error {
	for _, name := range AllQuotas {
		if c, v := b.ceilings.Limit(name), q.Limit(name); c > 0 && v > c {
			return fault.Errorf(fault.Invalid, "quotas.%s may be at most %d on this server (its operator's ceiling); 0 or null restores the server's default, %d", string(name), c, b.defaults.Limit(name))
		}
	}
	return nil
}
