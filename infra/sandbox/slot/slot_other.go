//go:build !linux

package slot

import "errors"

var errNotLinux = errors.New("slot: warm sandbox slots need Linux mount propagation")

// Make fails: slots need Linux.
func Make(string, int) error { return errNotLinux }

// Bind fails: slots need Linux.
func Bind(string, int, string, bool) error { return errNotLinux }

// Remove fails: slots need Linux.
func Remove(string) error { return errNotLinux }

// Clean does nothing: there are no slots off Linux.
func Clean(string) error { return nil }

// BindAt fails: slots need Linux.
func BindAt(string, string, bool) error { return errNotLinux }

// MakeShared fails: slots need Linux.
func MakeShared(string) error { return errNotLinux }

// ReadOnly fails: slots need Linux.
func ReadOnly(string) error { return errNotLinux }

// RemoveTree fails: slots need Linux.
func RemoveTree(string) error { return errNotLinux }
