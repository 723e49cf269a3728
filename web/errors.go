package web

import (
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// envelope is the Anthropic error envelope of CONTRACT §8.
type envelope struct {
	Type  string       `json:"type"`
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// statusOf maps an error kind to its HTTP status.
func statusOf(k fault.Kind) int {
	switch k {
	case fault.Invalid:
		return http.StatusBadRequest
	case fault.Unauthenticated:
		return http.StatusUnauthorized
	case fault.Forbidden:
		return http.StatusForbidden
	case fault.NotFound:
		return http.StatusNotFound
	case fault.Conflict:
		return http.StatusConflict
	case fault.TooLarge:
		return http.StatusRequestEntityTooLarge
	case fault.RateLimited:
		return http.StatusTooManyRequests
	case fault.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// typeOf maps an HTTP status to the envelope's error type.
func typeOf(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// Classifier maps errors of other packages (that do not use fault) to a
// status and a caller-safe message; ok is false when it does not know err.
type Classifier func(err error) (status int, msg string, ok bool)

// errorHandler is the one place that turns errors into responses.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	status, msg := s.classify(err)
	if status >= 500 {
		s.log.Error("request failed", "method", c.Method(), "path", c.Path(), "status", status, "err", err)
	}
	return writeError(c, status, msg)
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
	return c.JSON(envelope{Type: "error", Error: envelopeBody{Type: typeOf(status), Message: msg}})
}
