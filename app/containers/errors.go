package containers

import (
	"context"
	"errors"
	"fmt"

	"threadbox/domain/fault"
	"threadbox/domain/id"
	"threadbox/domain/sandbox"
)

// hide turns a failure of the sandbox machinery — a backend's error, a
// host folder's, the database's — into the error its caller may show to a
// tenant: a stable message with an error id. The cause, which may name host
// paths, the Docker daemon's socket or bubblewrap's arguments, goes to the
// server log once, with that id, and stays the wrapped cause, so errors.Is
// still finds sandbox.ErrUnavailable and the rest. Errors that are already
// the caller's to read (fault kinds: a quota, another server's sandbox, an
// expired container), sandbox.ErrNoBackend and the end of the context pass as they
// are. attrs add to the log line.
func (s *Service) hide(containerID, op string, err error, attrs ...any) error {
	if err == nil || errors.Is(err, sandbox.ErrNoBackend) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || fault.KindOf(err) != fault.Internal {
		return err
	}
	eid := id.New("err")
	s.log.Error("sandbox "+op+" failed", append([]any{"container", containerID, "error_id", eid, "cause", err.Error()}, attrs...)...)
	return fault.Wrap(fault.Unavailable, fmt.Sprintf("sandbox %s failed (error id %s; the server's log has the cause)", op, eid), err)
}
