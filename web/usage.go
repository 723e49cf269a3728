package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/app/usage"
	"threadbox/domain/fault"
)

// usageDefaultDays is the span of a usage report that names no from.
const usageDefaultDays = 30

// usageView is one row of GET /org/usage: a day's sums (Day), a user's
// (UserID, Email), a container's (ContainerID, its client id, thread and
// owner) or a thread's (ThreadID, Title, owner).
type usageView struct {
	Day          string  `json:"day,omitempty"`
	UserID       string  `json:"user_id,omitempty"`
	Email        string  `json:"email,omitempty"`
	ContainerID  *string `json:"container_id,omitempty"`
	ClientID     string  `json:"container,omitempty"`
	ThreadID     *string `json:"thread_id,omitempty"`
	Title        string  `json:"title,omitempty"`
	Commands     int64   `json:"commands"`
	WallSeconds  float64 `json:"wall_seconds"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	// Sandbox time: how long sandboxes ran and their control groups' CPU.
	SandboxSeconds    float64 `json:"sandbox_seconds"`
	SandboxCPUSeconds float64 `json:"sandbox_cpu_seconds"`
}

// getUsage is GET /org/usage?from=YYYY-MM-DD&to=YYYY-MM-DD&group_by=day|user|container|thread:
// the org's metered usage (commands, wall and CPU time, model tokens) over
// the UTC days from..to, both included; to defaults to today, from to 29
// days before to, group_by to day. Admins only.
func (s *Server) getUsage(c *fiber.Ctx) error {
	if s.svc.Usage == nil {
		return fault.New(fault.Unavailable, "usage metering is not configured on this server")
	}
	to := c.Query("to", time.Now().UTC().Format(usage.DayLayout))
	from := c.Query("from")
	if from == "" {
		t, err := time.Parse(usage.DayLayout, to)
		if err != nil {
			return fault.New(fault.Invalid, "to must be a date, YYYY-MM-DD")
		}
		// The default span starts no earlier than the first day a date
		// can name, so that a to near it does not make a from that is not
		// one.
		start := t.AddDate(0, 0, -(usageDefaultDays - 1))
		if first := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC); start.Before(first) {
			start = first
		}
		from = start.Format(usage.DayLayout)
	}
	by := usage.GroupBy(c.Query("group_by", string(usage.ByDay)))
	rows, err := s.svc.Usage.Report(c.UserContext(), principal(c), from, to, by)
	if err != nil {
		return err
	}
	out := make([]usageView, len(rows))
	for i, r := range rows {
		out[i] = usageView{
			Day: r.Day, UserID: r.UserID, Email: r.Email, ClientID: r.ClientID, Title: r.Title,
			Commands: r.Commands, WallSeconds: r.Wall.Seconds(), CPUSeconds: r.CPU.Seconds(),
			InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
			SandboxSeconds: r.SandboxTime.Seconds(), SandboxCPUSeconds: r.SandboxCPU.Seconds(),
		}
		// Per container and per thread, the key is always present: empty
		// for the usage outside any container or thread.
		switch by {
		case usage.ByContainer:
			out[i].ContainerID, out[i].ThreadID = &r.ContainerID, &r.ThreadID
		case usage.ByThread:
			out[i].ThreadID = &r.ThreadID
		}
	}
	return c.JSON(listResponse[usageView]{Data: out})
}
