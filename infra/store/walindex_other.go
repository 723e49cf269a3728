//go:build !unix

package store

import "errors"

// walIndex is mapped on Unix systems only; elsewhere the memo asks the
// database for its version on every lookup.
type walIndex struct{}

func openWALIndex(string) (*walIndex, error) {
	return nil, errors.New("store: no shared mapping of the wal index on this system")
}

func (*walIndex) quiet() bool { return false }

func (*walIndex) close() {}
