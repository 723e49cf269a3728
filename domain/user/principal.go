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
}

// IsAdmin reports whether the caller administers their org. A sandbox
// token never does, whatever its user's role: it acts for its user on the
// container of its own sandbox only, so code running there cannot use an
// admin's authority over the org (its skills, users, policy or usage).
func (p Principal) IsAdmin() bool { return p.Role == Admin && p.Kind != SandboxToken }
