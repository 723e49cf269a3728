package web

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/messages"
	"threadbox/app/messages/wire"
	"threadbox/app/turns"
)

// parseMessagesRequest decodes a Messages API body.
func parseMessagesRequest(c *fiber.Ctx) (*wire.Request, error) {
	b, err := body(c, maxJSONBody)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errNotObject
	}
	// Its own UnmarshalJSON validates the whole body; json.Unmarshal would
	// scan it once more first.
	var req wire.Request
	if err := req.UnmarshalJSON(b); err != nil {
		return nil, bodyError("invalid request body", err, wireErr)
	}
	return &req, nil
}

// wireErr tells why wire refused a Messages API body: a syntax error as
// encoding/json words it, any other refusal in wire's words, which name
// the field as the client wrote it.
func wireErr(err error) string {
	if msg := jsonErr(err); msg != "malformed" {
		return msg
	}
	return err.Error()
}

// frontDoor returns the turns service (503 when none is configured) and
// the call's Messages API request.
func (s *Server) frontDoor(c *fiber.Ctx) (*turns.Service, *wire.Request, error) {
	if err := s.svc.Turns.Ready(); err != nil {
		return nil, nil, err
	}
	req, err := parseMessagesRequest(c)
	if err != nil {
		return nil, nil, err
	}
	return s.svc.Turns, req, nil
}

// createMessage is POST /api/gpt/v1/messages: one turn of the tool loop,
// answered as a Messages response or, with stream, as its event stream.
func (s *Server) createMessage(c *fiber.Ctx) error {
	door, req, err := s.frontDoor(c)
	if err != nil {
		return err
	}
	if s.svc.Auth != nil {
		// A turn started from inside a sandbox ends when the turn whose
		// token it came with does.
		ctx, err := s.svc.Auth.Bound(c.UserContext(), principal(c))
		if err != nil {
			return err
		}
		c.SetUserContext(ctx)
	}
	turn, err := door.Prepare(c.UserContext(), principal(c), req, nil)
	if err != nil {
		return err
	}
	if req.Stream && betaFeature(c, LiveOutputBeta) {
		turn.LiveOutput()
	}
	return s.answerTurn(c, req.Stream, turn.Run, "messages")
}

// LiveOutputBeta is the threadbox-beta feature that adds the output of
// running commands to a Messages API stream (docs/messages.md).
const LiveOutputBeta = "live-output"

// betaFeature reports whether the request's threadbox-beta header (a
// comma-separated list) names feature.
func betaFeature(c *fiber.Ctx, feature string) bool {
	for f := range strings.SplitSeq(c.Get("threadbox-beta"), ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// validateResult is the answer of POST /api/gpt/v1/messages/validate.
type validateResult struct {
	Type  string `json:"type"` // "message_validation"
	Valid bool   `json:"valid"`
	Model string `json:"model"`
	*messages.Plan
	Stream    bool               `json:"stream"`
	Container *validateContainer `json:"container"`
	Skills    []string           `json:"skills"`
}

type validateContainer struct {
	ID        string     `json:"id"`
	Exists    bool       `json:"exists"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// validateMessage is POST /api/gpt/v1/messages/validate: the same body,
// checked (tool specs, container access and age, container files, skills)
// without running a model or code or creating anything.
func (s *Server) validateMessage(c *fiber.Ctx) error {
	door, req, err := s.frontDoor(c)
	if err != nil {
		return err
	}
	v, err := door.Validate(c.UserContext(), principal(c), req)
	if err != nil {
		return err
	}
	out := validateResult{Type: "message_validation", Valid: true, Model: v.Model, Plan: v.Plan, Stream: req.Stream, Skills: v.Skills}
	if vc := v.Container; vc != nil {
		out.Container = &validateContainer{ID: vc.ID, Exists: vc.Exists, ExpiresAt: vc.ExpiresAt}
	}
	return c.JSON(out)
}
