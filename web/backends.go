package web

import (
	"github.com/gofiber/fiber/v2"

	"threadbox/app/backends"
	"threadbox/domain/fault"
	"threadbox/domain/user"
)

// backendView is one row of GET /api/gpt/v1/sandbox/backends.
type backendView struct {
	Name           string   `json:"name"`
	Primary        bool     `json:"primary"`
	Available      bool     `json:"available"`
	Reason         string   `json:"reason,omitempty"`
	Isolation      string   `json:"isolation"`
	Limits         []string `json:"limits"`
	LimitMechanism string   `json:"limit_mechanism,omitempty"`
	// Warning says what the backend must not be used for: the local
	// backend's row says it is a development jail, not for untrusted code.
	Warning string `json:"warning,omitempty"`
	// WarmPool is the backend's pool of pre-booted sandboxes.
	WarmPool *warmPoolView `json:"warm_pool,omitempty"`
	// Checkpoint says whether the backend keeps a sandbox's running state
	// across a stop, or its files only and why.
	Checkpoint checkpointView `json:"checkpoint"`
}

// checkpointView is a backend's answer about checkpoints on this host.
type checkpointView struct {
	Supported bool   `json:"supported"`
	Mechanism string `json:"mechanism,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// warmPoolView is a backend's warm pool in the capability matrix.
type warmPoolView struct {
	Size  int    `json:"size"`
	Ready int    `json:"ready"`
	Note  string `json:"note,omitempty"`
}

// sandboxBackends serves the capability matrix to org admins.
func (s *Server) sandboxBackends(c *fiber.Ctx) error {
	p := principal(c)
	if p.Kind == user.SandboxToken {
		return fault.New(fault.Forbidden, "sandbox tokens may not view the sandbox backends")
	}
	svc := s.svc.Backends
	if svc == nil {
		svc = backends.New(nil)
	}
	entries, err := svc.Matrix(c.UserContext(), p)
	if err != nil {
		return err
	}
	out := make([]backendView, len(entries))
	for i, e := range entries {
		out[i] = backendView{Name: e.Name, Primary: e.Primary, Available: e.Available, Reason: e.Reason,
			Isolation: e.Isolation, Limits: e.Limits, LimitMechanism: e.Mechanism, Warning: e.Warning,
			Checkpoint: checkpointView{Supported: e.Checkpoint.Supported, Mechanism: e.Checkpoint.Mechanism, Reason: e.Checkpoint.Reason}}
		if w := e.WarmPool; w != nil {
			out[i].WarmPool = &warmPoolView{Size: w.Size, Ready: w.Ready, Note: w.Note}
		}
		if out[i].Limits == nil {
			out[i].Limits = []string{}
		}
	}
	return c.JSON(fiber.Map{"data": out})
}
