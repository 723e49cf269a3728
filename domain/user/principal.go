package user

// Principal is who is calling: taken from a verified token, never from a
// request body.
type Principal struct {
	UserID  string
	OrgID   string
	Role    Role
	TokenID string
	Kind    TokenKind
	// ContainerID limits a sandbox token to the container it was made for.
	ContainerID string
	// Within is, for a sandbox token issued to a turn that a sandbox token
	// started (a Messages request from inside a sandbox), the first
	// sandbox token of that chain: the token works only while that one
	// does, so nothing started from inside a sandbox outlives its turn.
	Within string
}

// IsAdmin reports whether the caller administers their org. A sandbox
// token never does, whatever its user's role: it acts for its user on the
// container of its own sandbox only, so code running there cannot use an
// admin's authority over the org (its skills, users, policy or usage).
func (p Principal) IsAdmin() bool { return p.Role == Admin && p.Kind != SandboxToken }
