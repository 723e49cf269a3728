package files

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"threadbox/domain/fault"
	"threadbox/domain/file"
)

func TestErrorMapping(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("store: %w", err) }
	mountErr := &file.MountError{Path: "/etc/x", Err: file.ErrNoMount}
	tests := []struct {
		name  string
		err   error
		read  fault.Kind
		write fault.Kind
	}{
		{"not found", wrap(file.ErrNotFound), fault.NotFound, fault.Internal},
		{"parent is a file", wrap(fmt.Errorf("%w: %w", file.ErrNotDir, file.ErrNotFound)), fault.NotFound, fault.Conflict},
		{"symlink", wrap(file.ErrSymlink), fault.NotFound, fault.Invalid},
		{"not regular", wrap(file.ErrNotRegular), fault.NotFound, fault.Conflict},
		{"read-only", wrap(file.ErrReadOnly), fault.Forbidden, fault.Forbidden},
		{"too large", wrap(file.ErrTooLarge), fault.TooLarge, fault.Internal},
		{"mount", wrap(mountErr), fault.NotFound, fault.Internal},
		{"container disk full", wrap(fmt.Errorf("%w: %w", file.ErrDiskFull, file.ErrTooLarge)), fault.TooLarge, fault.TooLarge},
		{"server disk full", wrap(file.ErrServerDiskFull), fault.Internal, fault.Unavailable},
		{"other", errors.New("disk on fire"), fault.Internal, fault.Internal},
	}
	for _, tt := range tests {
		if got := fault.KindOf(readErr(tt.err, "x")); got != tt.read {
			t.Errorf("%s: readErr kind %s, want %s", tt.name, got, tt.read)
		}
		if got := fault.KindOf(writeErr(tt.err, "x")); got != tt.write {
			t.Errorf("%s: writeErr kind %s, want %s", tt.name, got, tt.write)
		}
		if m := fault.MessageOf(readErr(tt.err, "x")); m == "" || errors.Is(tt.err, file.ErrNotFound) && m != "file not found: x" {
			t.Errorf("%s: message %q", tt.name, m)
		}
	}
	for _, err := range []error{context.Canceled, wrap(context.DeadlineExceeded)} {
		for _, got := range []error{readErr(err, "x"), writeErr(err, "x")} {
			var fe *fault.Error
			if !errors.Is(got, err) || errors.As(got, &fe) {
				t.Errorf("context error %v not passed through as is: %v", err, got)
			}
		}
	}
}
