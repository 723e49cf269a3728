//go:build !linux

package store

import "errors"

// dirWatch is Linux's only (inotify); elsewhere the memo asks the database
// for its version on every lookup.
type dirWatch struct{}

func watchDir(string) (*dirWatch, error) {
	return nil, errors.New("store: no folder watch on this system")
}

func (*dirWatch) quiet() bool { return false }

func (*dirWatch) close() {}
