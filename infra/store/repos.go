package store

// The repositories, one per aggregate. Each is a value over the handle of
// the Store that made it (or of the transaction it runs in), so they share
// one set of connections; each app package declares the small interface it
// consumes, and the wiring hands it the repository that fits.

// Accounts keeps orgs, users, their tokens and the audit log (app/auth,
// app/admin).
type Accounts struct{ *handle }

// Logins keeps the counters of login throttling and the addresses each
// user logged in from (app/auth).
type Logins struct{ *handle }

// Threads keeps projects, threads and their messages (app/workspace,
// app/containers).
type Threads struct{ *handle }

// Artifacts keeps the artifacts saved from threads (app/workspace).
type Artifacts struct{ *handle }

// Snapshots keeps the records of threads' files snapshots (app/workspace).
type Snapshots struct{ *handle }

// Containers keeps container records and the tombstones of those removed
// at their maximum age (app/containers).
type Containers struct{ *handle }

// Turns keeps detached turns and their event logs (app/turns).
type Turns struct{ *handle }

// Skills keeps skill versions (app/skills).
type Skills struct{ *handle }

// Quota counts what the org quotas bound and reserves running-sandbox
// slots (app/quota).
type Quota struct{ *handle }

// Usage keeps the daily usage counters and the records of running
// commands (app/usage).
type Usage struct{ *handle }

// Leases keeps the leases of server processes and carries the requests to
// hand one over (app/lease, app/containers).
type Leases struct{ *handle }

// Files keeps the records of the files beside containers (app/files).
type Files struct{ *handle }

// Locks are named locks every server on the database shares (app/skills,
// app/workspace).
type Locks struct{ *handle }

// Accounts returns the accounts repository.
func (s *Store) Accounts() Accounts { return Accounts{s.handle} }

// Logins returns the login throttling repository.
func (s *Store) Logins() Logins { return Logins{s.handle} }

// Threads returns the projects and threads repository.
func (s *Store) Threads() Threads { return Threads{s.handle} }

// Artifacts returns the artifacts repository.
func (s *Store) Artifacts() Artifacts { return Artifacts{s.handle} }

// Snapshots returns the files snapshots' repository.
func (s *Store) Snapshots() Snapshots { return Snapshots{s.handle} }

// Containers returns the container records' repository.
func (s *Store) Containers() Containers { return Containers{s.handle} }

// Turns returns the turns repository.
func (s *Store) Turns() Turns { return Turns{s.handle} }

// Skills returns the skills repository.
func (s *Store) Skills() Skills { return Skills{s.handle} }

// Quota returns the quota counts' repository.
func (s *Store) Quota() Quota { return Quota{s.handle} }

// Usage returns the usage repository.
func (s *Store) Usage() Usage { return Usage{s.handle} }

// Leases returns the leases repository.
func (s *Store) Leases() Leases { return Leases{s.handle} }

// Files returns the file records' repository.
func (s *Store) Files() Files { return Files{s.handle} }

// Locks returns the shared locks.
func (s *Store) Locks() Locks { return Locks{s.handle} }
