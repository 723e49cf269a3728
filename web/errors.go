package web

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/domain/fault"
	"threadbox/domain/id"
)

// envelope is the Anthropic error envelope (docs/api.md, Errors).
type envelope struct {
	Type      string       `json:"type"`
	Error     envelopeBody `json:"error"`
	RequestID string       `json:"request_id,omitempty"` // as Anthropic's errors carry it
}

type envelopeBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// statuses are the HTTP statuses of the error kinds; any other kind is a
// server error.
var statuses = map[fault.Kind]int{
	fault.Invalid:         http.StatusBadRequest,
	fault.Unauthenticated: http.StatusUnauthorized,
	fault.Forbidden:       http.StatusForbidden,
	fault.NotFound:        http.StatusNotFound,
	fault.Conflict:        http.StatusConflict,
	fault.TooLarge:        http.StatusRequestEntityTooLarge,
	fault.RateLimited:     http.StatusTooManyRequests,
	fault.Unavailable:     http.StatusServiceUnavailable,
	fault.Upstream:        http.StatusBadGateway,
	fault.Timeout:         http.StatusGatewayTimeout,
}

// statusOf maps an error kind to its HTTP status.
func statusOf(k fault.Kind) int {
	if st, ok := statuses[k]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// errorTypes are the envelope's error types of the statuses that have
// their own; other server errors are api_error, other client errors
// invalid_request_error.
var errorTypes = map[int]string{
	http.StatusUnauthorized:    "authentication_error",
	http.StatusForbidden:       "permission_error",
	http.StatusNotFound:        "not_found_error",
	http.StatusTooManyRequests: "rate_limit_error",
}

// typeOf maps an HTTP status to the envelope's error type.
func typeOf(status int) string {
	if t, ok := errorTypes[status]; ok {
		return t
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// Classifier maps errors of other packages (that do not use fault) to a
// status and a caller-safe message; ok is false when it does not know err.
type Classifier func(err error) (status int, msg string, ok bool)

// errorHandler is the one place that turns errors into responses. A
// server error is logged with a new error id, and an internal one (whose
// cause may name host paths, the database or the Docker daemon) shows the
// caller only a stable message and that id.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	status, msg := s.classify(err)
	if status >= 500 {
		eid := id.New("err")
		s.log.Error("request failed", "method", c.Method(), "path", c.Path(), "status", status, "error_id", eid, "request_id", requestID(c), "err", err)
		if fault.KindOf(err) == fault.Internal {
			msg = withErrorID(msg, eid)
		}
	}
	return writeError(c, status, msg)
}

// withErrorID adds an error id to a stable message shown for a failure
// whose cause only the server's log has.
func withErrorID(msg, eid string) string {
	return strings.TrimSuffix(msg, ".") + " (error id " + eid + ")"
}

func (s *Server) classify(err error) (int, string) {
	var fe *fiber.Error
	switch {
	case errors.As(err, &fe):
		msg := fe.Message
		if fe.Code == http.StatusNotFound && msg == "Cannot "+"GET" {
			msg = "not found"
		}
		return fe.Code, msg
	case fault.KindOf(err) != fault.Internal:
		return statusOf(fault.KindOf(err)), fault.MessageOf(err)
	case errors.Is(err, errTornBody):
		// The client left mid-upload: its request, not the server, failed.
		return http.StatusBadRequest, errTornBody.Error()
	case errors.Is(err, errUnclosedMultipart):
		// The file store reports the upload's read error as its own.
		return http.StatusBadRequest, errUnclosedMultipart.Error()
	}
	for _, cl := range s.classifiers {
		if st, msg, ok := cl(err); ok {
			return st, msg
		}
	}
	return http.StatusInternalServerError, "internal server error"
}

func writeError(c *fiber.Ctx, status int, msg string) error {
	c.Status(status)
	if c.Method() == fiber.MethodHead {
		return nil
	}
	return c.JSON(envelope{Type: "error", Error: envelopeBody{Type: typeOf(status), Message: msg}, RequestID: requestID(c)})
}

// turnError answers a turn that failed before any byte was sent: model
// upstream and tool-loop errors as app/messages maps them (an upstream's
// own status), the rest as every other error. what names the turn's kind
// in the log.
func (s *Server) turnError(c *fiber.Ctx, what string, err error) error {
	if fault.KindOf(err) != fault.Internal {
		return err
	}
	status, body := messages.ErrorStatus(err)
	if status >= 500 {
		eid := id.New("err")
		s.log.Error("turn failed", "turn", what, "path", c.Path(), "status", status, "error_id", eid, "request_id", requestID(c), "err", err)
		body.Message = withErrorID(body.Message, eid)
	}
	return c.Status(status).JSON(envelope{Type: "error", Error: envelopeBody{Type: body.Type, Message: body.Message}, RequestID: requestID(c)})
}

// errorEvent returns the event that ends a stream broken by err, mapped as
// turnError maps errors before the stream began.
func (s *Server) errorEvent(what string, err error) wire.Event {
	ev := messages.ErrorEvent(err)
	if k := fault.KindOf(err); k != fault.Internal {
		ev.Error = &wire.ErrorBody{Type: typeOf(statusOf(k)), Message: fault.MessageOf(err)}
		return ev
	}
	eid := id.New("err")
	s.log.Warn("turn failed mid-stream", "turn", what, "error_id", eid, "err", err)
	if st, _ := messages.ErrorStatus(err); st >= 500 {
		ev.Error.Message = withErrorID(ev.Error.Message, eid)
	}
	return ev
}
