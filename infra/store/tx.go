package store

import (
	"context"

	"threadbox/app/admin"
)

// InTxAdmin runs fn on the accounts bound to one transaction (admin.Store).
func (s Accounts) InTxAdmin(ctx context.Context, fn func(admin.Store) error) error {
	return s.inTx(ctx, func(tx *handle) error { return fn(Accounts{tx}) })
}
