package messages

import (
	"log/slog"

	"threadbox/domain/fault"
	"threadbox/domain/id"
)

// Explain returns what a tool result may tell the tenant about err, a
// failure of the machinery under a tool (the sandbox, the host's files):
// the message of a fault error, which is written for the caller
// (app/containers gives every failure of a sandbox one, with an error id);
// for any other error, whose text may name host paths, daemon sockets or
// the jail's arguments, only a new error id, logged on log with the cause.
func Explain(log *slog.Logger, err error) string {
	if fault.KindOf(err) != fault.Internal {
		return fault.MessageOf(err)
	}
	eid := id.New("err")
	if log != nil {
		log.Error("tool failed", "error_id", eid, "cause", err.Error())
	}
	return "error id " + eid + "; the server's log has the cause"
}
