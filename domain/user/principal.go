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

// IsAdmin reports whether the caller administers their org.
func (p Principal) IsAdmin() bool { return p.Role == Admin }
