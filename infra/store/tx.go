package store

import (
	"context"

	"threadbox/app/admin"
)

// InTxAdmin runs fn on a Store bound to one transaction (admin.Store).
func (s *Store) InTxAdmin(ctx context.Context, fn func(admin.Store) error) error {
	return s.InTx(ctx, func(tx *Store) error { return fn(tx) })
}
