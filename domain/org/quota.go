package org

import (
	"fmt"
	"slices"

	"threadbox/domain/fault"
)

// Quota names one resource limit of the policy, as it is spelled on the wire
// (under "quotas").
type Quota string

// The quotas an org admin can set.
const (
	// RunningSandboxesPerUser bounds the sandboxes one user has running
	// at once.
	RunningSandboxesPerUser Quota = "runningSandboxesPerUser"
	// RunningSandboxesPerOrg bounds the sandboxes the whole org has
	// running at once.
	RunningSandboxesPerOrg Quota = "runningSandboxesPerOrg"
	// ContainersPerUser bounds the containers (thread containers and
	// Messages API containers) one user owns.
	ContainersPerUser Quota = "containersPerUser"
	// StorageBytesPerOrg bounds the bytes the org stores: its containers'
	// files, its artifacts, its skills, its threads' messages and its
	// turns' logs.
	StorageBytesPerOrg Quota = "storageBytesPerOrg"
	// SnapshotsPerThread bounds the files snapshots one thread keeps (the
	// oldest go first); 0 keeps the default, 20. It is a retention, not a
	// refusal: a turn past it drops the thread's oldest snapshot.
	SnapshotsPerThread Quota = "snapshotsPerThread"
	// SnapshotBytesPerThread bounds the bytes one thread's files
	// snapshots store together (the oldest go first); 0 bounds them by
	// the storage quota alone.
	SnapshotBytesPerThread Quota = "snapshotBytesPerThread"
)

// quotaOrder lists every quota in wire order; a quota's place in it is
// where Quotas keeps its limit.
var quotaOrder = [...]Quota{RunningSandboxesPerUser, RunningSandboxesPerOrg, ContainersPerUser, StorageBytesPerOrg, SnapshotsPerThread, SnapshotBytesPerThread}

// AllQuotas lists every quota in wire order (a copy of quotaOrder, so that
// a caller cannot move where Quotas keeps a limit).
var AllQuotas = slices.Clone(quotaOrder[:])

// Quotas are an org's resource limits, a value object: each quota's limit
// at the quota's place in quotaOrder. Zero means unlimited, which is every
// quota's default.
type Quotas struct {
	limits [len(quotaOrder)]int64
}

// NewQuotas builds quotas from their limits by name; a missing name is
// unlimited, a negative limit or an unknown name is refused.
func NewQuotas(limits map[Quota]int64) (Quotas, error) {
	var q Quotas
	for name, v := range limits {
		if err := q.set(name, v); err != nil {
			return Quotas{}, err
		}
	}
	return q, nil
}

// limit returns where quota name's limit is kept, or nil for an unknown
// name.
func (q *Quotas) limit(name Quota) *int64 {
	// A look through six names, not a map built per call: the org policy
	// applies its bounds on every request, a few dozen lookups each.
	for i, n := range quotaOrder {
		if n == name {
			return &q.limits[i]
		}
	}
	return nil
}

// Limit returns quota name's limit; zero means unlimited.
func (q Quotas) Limit(name Quota) int64 {
	if l := q.limit(name); l != nil {
		return *l
	}
	return 0
}

// set changes one limit, refusing negative ones and unknown names.
func (q *Quotas) set(name Quota, v int64) error {
	if v < 0 {
		return fault.Errorf(fault.Invalid, "quotas.%s must be 0 (unlimited) or a positive number", name)
	}
	l := q.limit(name)
	if l == nil {
		return fault.Errorf(fault.Invalid, "unknown quota %q", string(name))
	}
	*l = v
	return nil
}

// Admit checks that one more of what the count quota name bounds fits when
// used are in use now. A refusal names the quota: running sandboxes are a
// fault.RateLimited (they stop when idle, so waiting helps), containers a
// fault.Forbidden. The storage quota is checked with AdmitBytes.
func (q Quotas) Admit(name Quota, used int64) error {
	limit := q.Limit(name)
	if limit == 0 || used < limit {
		return nil
	}
	switch name {
	case RunningSandboxesPerUser:
		return fault.Errorf(fault.RateLimited, "quota %q reached: your organization allows %s per user and you have %d running; an idle sandbox stops after a few minutes, or an org admin can raise the quota", string(name), plural(limit, "running sandbox", "running sandboxes"), used)
	case RunningSandboxesPerOrg:
		return fault.Errorf(fault.RateLimited, "quota %q reached: your organization allows %s and %d are running; an idle sandbox stops after a few minutes, or an org admin can raise the quota", string(name), plural(limit, "running sandbox", "running sandboxes"), used)
	case ContainersPerUser:
		return fault.Errorf(fault.Forbidden, "quota %q reached: your organization allows %s per user and you have %d; delete a thread you no longer need, or an org admin can raise the quota", string(name), plural(limit, "container", "containers"), used)
	}
	return fault.Errorf(fault.Invalid, "quota %q does not count things", string(name))
}

// BytesLeft returns how many more bytes the org may store when used are in
// use, or -1 when it has no storage quota.
func (q Quotas) BytesLeft(used int64) int64 {
	storage := q.Limit(StorageBytesPerOrg)
	if storage == 0 {
		return -1
	}
	return max(storage-used, 0)
}

// AdmitBytes checks that n more bytes fit the storage quota when used are
// in use; a refusal is a fault.TooLarge naming the quota. With n zero it
// refuses only an org already past its quota.
func (q Quotas) AdmitBytes(used, n int64) error {
	storage := q.Limit(StorageBytesPerOrg)
	if storage == 0 || used+n <= storage {
		return nil
	}
	return StorageExceeded(storage, used, n)
}

// StorageExceeded returns the refusal of storing n more bytes (0 when
// unknown, as for an upload still arriving) past the storage quota limit
// with used in use.
func StorageExceeded(limit, used, n int64) error {
	what := "nothing more fits"
	switch left := max(limit-used, 0); {
	case n > 0:
		what = fmt.Sprintf("%d more bytes do not fit in the %d left", n, left)
	case left > 0:
		what = fmt.Sprintf("the upload is larger than the %d bytes left", left)
	}
	return fault.Errorf(fault.TooLarge, "quota %q exceeded: your organization may store %d bytes (container files, sandbox checkpoints, artifacts, skills, messages and turn logs), %d are in use and %s; delete files or threads, or an org admin can raise the quota", string(StorageBytesPerOrg), limit, used, what)
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
