package auth

import (
	"context"
	"fmt"
	"time"
)

// EndedTokenGrace is how long a token record is kept after it expired or
// was revoked. Every token that names a record (an API, session or sandbox
// token, a browser session's refresh and access tokens, a download ticket)
// is refused once its record is unusable, and refused the same way once
// the record is gone, so deleting it changes no answer; the day is kept
// so that an expired or revoked API token still shows in its owner's list
// for a while, revoking it again still answers 204 rather than 404, and
// servers whose clocks disagree by minutes cannot matter.
const EndedTokenGrace = 24 * time.Hour

// SweepTokens deletes the token records that expired or were revoked more
// than EndedTokenGrace ago, and returns how many it deleted.
func (s *Service) SweepTokens(ctx context.Context) (int, error) {
	n, err := s.store.DeleteEndedTokens(ctx, s.now().Add(-EndedTokenGrace))
	if err != nil {
		return int(n), fmt.Errorf("auth: delete ended tokens: %w", err)
	}
	return int(n), nil
}
